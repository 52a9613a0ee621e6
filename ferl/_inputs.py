"""Checks and preparation of `FERLClassifier`'s inputs: fit's weights, names and seed; `explain`'s
single sample; the certificate's perturbation domain."""

from __future__ import annotations

from numbers import Integral

import numpy as np

__all__ = ["check_sample_weight", "rescale_weights", "resolve_feature_names", "str_columns", "seed_from",
           "one_sample", "feature_domain"]


def check_sample_weight(sample_weight, n_samples: int) -> np.ndarray:
    """Validate fit's ``sample_weight`` for ``n_samples`` rows.

    Parameters
    ----------
    sample_weight : array-like of shape (n_samples,), number or None
        Real weights (bools and integers are converted); a number weighs every row the same; None
        means all ones.
    n_samples : int

    Returns
    -------
    ndarray of shape (n_samples,), float64, C-contiguous, finite, >= 0, not all zero
        A new array (the caller's is never written to).

    Raises
    ------
    ValueError
        A non-numeric or complex weight, another shape, NaN or infinity, a negative weight, or
        all weights zero (the message names the problem).
    """
    if sample_weight is None:
        return np.ones(n_samples)
    sw = np.asarray(sample_weight)
    if sw.dtype.kind == "O":  # e.g. a pandas nullable column
        try:
            sw = sw.astype(np.float64)
        except (TypeError, ValueError) as err:
            raise ValueError(f"sample_weight must hold real numbers: {err}") from err
    if sw.dtype.kind not in "biuf":
        raise ValueError(f"sample_weight must hold real numbers, got dtype {sw.dtype}")
    sw = np.array(np.broadcast_to(sw, (n_samples,)) if sw.ndim == 0 else sw, dtype=np.float64, order="C")
    if sw.shape != (n_samples,):
        raise ValueError(f"sample_weight has shape {sw.shape}, expected ({n_samples},): one weight per "
                         f"sample, or a scalar")
    if not np.isfinite(sw).all():
        raise ValueError("sample_weight contains NaN or infinity")
    if (sw < 0).any():
        raise ValueError(f"Negative values in sample_weight (min {float(sw.min())!r}); weights must be >= 0")
    if not sw.any():
        raise ValueError("sample_weight is zero everywhere: at least one weight must be positive")
    return sw


def rescale_weights(sw: np.ndarray) -> tuple[np.ndarray, float]:
    """Rescale weights to a mean positive weight of 1 and return them with the unit removed.

    Only relative weights matter: growing on rescaled weights keeps weights such as 1e-300 or
    1e300 from underflowing or overflowing in the split gains; the nodes' soft supports are then
    reported in the caller's units (times ``unit``).

    Parameters
    ----------
    sw : ndarray of shape (n,), float64, >= 0, with at least one positive entry

    Returns
    -------
    weights : ndarray of shape (n,), float64
    unit : float
    """
    top = float(sw.max())
    sw = sw / top
    unit = float(sw[sw > 0].mean())
    return sw / unit, unit * top


def resolve_feature_names(est, feature_names, n_features: int) -> list[str]:
    """``feature_names_in_`` when set, else the ``feature_names`` given to fit, else x0, x1...

    Raises
    ------
    ValueError
        A name count other than ``n_features``, or duplicate names.
    """
    if hasattr(est, "feature_names_in_"):
        names = [str(v) for v in est.feature_names_in_]
    elif feature_names is not None:
        names = [str(v) for v in feature_names]
    else:
        names = [f"x{j}" for j in range(n_features)]
    if len(names) != n_features:
        raise ValueError(f"feature_names has {len(names)} names but X has {n_features} features")
    if len(set(names)) != len(names):
        raise ValueError("feature_names contains duplicates")
    return names


def str_columns(X):
    """``X`` with its column labels as plain ``str`` when each is a ``str`` of a subclass (``numpy.str_``).

    scikit-learn keeps feature names only when every column label is exactly ``str``; labels read
    from an array (``list(np.load(f)["concept_names"])``) are ``numpy.str_``, and such a frame would
    be taken as unnamed: its columns read by position, a reordered frame accepted without a word
    and the rules named x0, x1... Turning them into ``str`` lets `fit` keep the names and the
    readers check the columns by name.

    Parameters
    ----------
    X : array-like or pandas.DataFrame

    Returns
    -------
    array-like or pandas.DataFrame
        ``X`` itself unless it is a frame whose labels are all ``str`` instances and not all plain
        ``str``; then a frame with the same values and plain ``str`` labels (the caller's is unchanged).
    """
    columns = getattr(X, "columns", None)
    if columns is None or not hasattr(X, "set_axis"):
        return X
    labels = list(columns)
    if all(type(c) is str for c in labels) or not all(isinstance(c, str) for c in labels):
        return X
    return X.set_axis([str(c) for c in labels], axis=1)


def seed_from(random_state) -> int | None:
    """Turn a scikit-learn ``random_state`` into a seed for ``numpy.random.default_rng``."""
    if random_state is None or isinstance(random_state, Integral):
        return random_state
    return int(random_state.randint(np.iinfo(np.int32).max))


def one_sample(x):
    """One sample of shape (d,) or (1, d) (array, Series or DataFrame) as a (1, d) array or frame
    (a Series becomes a one-row frame, so that its labels are checked against the feature names).

    Raises
    ------
    ValueError
        Another number of dimensions, or several rows.
    """
    if hasattr(x, "to_frame") and hasattr(x, "index"):  # a pandas Series: its labels name the features
        x = x.to_frame().T
    X = np.asarray(x, dtype=np.float64) if not hasattr(x, "columns") else x
    if X.ndim == 1:
        X = X.reshape(1, -1)
    if X.ndim != 2:
        raise ValueError(f"explain takes one sample of shape (n_features_in_,) or (1, n_features_in_), "
                         f"got an array of shape {X.shape}")
    if X.shape[0] != 1:
        raise ValueError(f"explain takes one sample, got {X.shape[0]} rows")
    return X


def feature_domain(domain, feature_range: np.ndarray) -> np.ndarray:
    """The domain that `robustness_radius` confines perturbations to, as one ``(lo, hi)`` per feature.

    A certificate holds for every ``x'`` of the domain within the radius: a feature that cannot
    leave ``[lo, hi]`` (a concept probability, a bounded measurement) is never perturbed past it,
    so a rule whose observed range reaches the domain's edge is no reason for a small radius.

    Parameters
    ----------
    domain : None, "training", pair of floats or array-like of shape (n_features, 2)
        None: every real value (the paper's certificate, appendix A.3). ``"training"``: the
        training range of each feature. A pair ``(lo, hi)``: the same bounds for every feature,
        e.g. ``(0, 1)`` for concept probabilities. An array: one row ``(lo, hi)`` per feature.
        Bounds may be infinite.
    feature_range : ndarray of shape (n_features, 2)
        The training min and max of each feature (`FERLClassifier.feature_range_`).

    Returns
    -------
    ndarray of shape (n_features, 2), float64
        A new array; ``lo <= hi`` on every row.

    Raises
    ------
    ValueError
        A string other than ``"training"``, bounds of another shape, NaN, ``lo > hi``, or bounds
        that hold no real value (``lo = inf`` or ``hi = -inf``).
    """
    n_features = feature_range.shape[0]
    if domain is None:
        return np.tile([-np.inf, np.inf], (n_features, 1))
    if isinstance(domain, str):
        if domain != "training":
            raise ValueError(f"domain must be None, 'training', (lo, hi) or an array of shape "
                             f"({n_features}, 2); got {domain!r}")
        return np.array(feature_range, dtype=np.float64)
    try:
        bounds = np.array(domain, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"domain must hold numbers, got {domain!r}") from err
    if bounds.shape == (2,):
        bounds = np.tile(bounds, (n_features, 1))
    if bounds.shape != (n_features, 2):
        raise ValueError(f"domain must be (lo, hi) or an array of shape ({n_features}, 2), got shape "
                         f"{bounds.shape}")
    empty = (np.isnan(bounds).any(axis=1) | (bounds[:, 0] > bounds[:, 1]) | (bounds[:, 0] == np.inf)
             | (bounds[:, 1] == -np.inf))
    if empty.any():
        bad = int(np.flatnonzero(empty)[0])
        raise ValueError(f"domain of feature {bad} is {bounds[bad].tolist()}: need lo <= hi, lo < inf, "
                         "hi > -inf and no NaN (a domain that holds a real value)")
    return bounds
