"""Evaluation metrics shared by every FERL evaluation (torch-free).

Point predictions (accuracy, selective-risk AURC, ECE) and set-valued predictions (coverage,
determinacy, mean set size, utility-discounted accuracy u65/u80); out-of-distribution (OOD)
detection (AUROC, AUPR-Out, FPR at 95 % TPR, rejection at a threshold that accepts 95 % of
in-distribution validation inputs) lives in `ferl.metrics.ood`; `ferl.metrics` re-exports both.

Conventions
-----------
* Class labels are integer indices in ``[0, n_classes)``; sets are boolean matrices of shape
  ``(n_samples, n_classes)`` whose column ``c`` says whether class ``c`` is in the set.
* Accuracy, coverage, determinacy, u65/u80, ECE, AUROC, AUPR-Out, FPR95 and rejection rates are
  fractions in ``[0, 1]``; AURC is on the 0-100 scale of the paper (§4.1, Table 1).
* OOD metrics treat **OOD as the positive class** and expect scores that **grow with novelty**.
* Every metric raises ``ValueError`` on empty inputs, NaN/inf, mismatched shapes, labels out of
  range, or (for OOD metrics) when only one kind of sample is given.
"""

from __future__ import annotations

import numpy as np
from sklearn.metrics import accuracy_score

from ferl.metrics.checks import finite_1d

__all__ = [
    "accuracy",
    "aurc",
    "coverage",
    "determinacy",
    "expected_calibration_error",
    "mean_set_size",
    "risk_coverage_curve",
    "u65",
    "u80",
    "utility_discounted_accuracy",
]

#: Zaffalon et al. (2012) utility parameters ``(a, b)`` for u(S) = a/|S| - b/|S|^2.
_UTILITY_PARAMS = {"u65": (1.6, 0.6), "u80": (2.2, 1.2)}


# --------------------------------------------------------------------------- validation helpers
def _labels(y: np.ndarray, name: str, n_classes: int | None = None) -> np.ndarray:
    arr = np.asarray(y)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array, got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name} must hold integer class indices, got dtype {arr.dtype}")
    if n_classes is not None and (arr.min() < 0 or arr.max() >= n_classes):
        raise ValueError(f"{name} has class indices outside [0, {n_classes})")
    return arr.astype(np.int64)


def _same_length(*pairs: tuple[str, np.ndarray]) -> None:
    lengths = {name: len(arr) for name, arr in pairs}
    if len(set(lengths.values())) != 1:
        raise ValueError(f"mismatched lengths: {lengths}")


def _label_pair(y_true: np.ndarray, y_pred: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    for name, arr in (("y_true", y_true), ("y_pred", y_pred)):
        if arr.ndim != 1 or arr.size == 0:
            raise ValueError(f"{name} must be a non-empty 1-D array, got shape {arr.shape}")
        if np.issubdtype(arr.dtype, np.floating) and not np.all(np.isfinite(arr)):
            raise ValueError(f"{name} contains NaN or inf")
    _same_length(("y_true", y_true), ("y_pred", y_pred))
    return y_true, y_pred


def _sets(sets: np.ndarray) -> np.ndarray:
    arr = np.asarray(sets)
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"sets must be a non-empty (n_samples, n_classes) matrix: {arr.shape}")
    if arr.dtype != bool:
        raise ValueError(f"sets must be boolean, got dtype {arr.dtype}")
    return arr


# --------------------------------------------------------------------------- point predictions
def accuracy(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Fraction of correct point predictions, in ``[0, 1]``.

    Parameters
    ----------
    y_true, y_pred : ndarray of shape (n_samples,)
        Labels of any hashable dtype (not necessarily integers).

    Raises
    ------
    ValueError
        Empty inputs, NaN labels, or different lengths.
    """
    y_true, y_pred = _label_pair(y_true, y_pred)
    return float(accuracy_score(y_true, y_pred))


def risk_coverage_curve(
    y_true: np.ndarray, y_pred: np.ndarray, confidence: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Selective risk at every coverage level ``k / n`` (paper §4.1, appendix G).

    Samples are accepted in decreasing order of ``confidence``. **Ties** are handled
    deterministically and order-free: inside a group of ``g`` tied samples holding ``e`` errors,
    accepting ``j`` of them counts ``j * e / g`` errors, i.e. the expected risk over a uniformly
    random order of the tied samples. Hence a constant confidence gives a flat curve at the error
    rate, and the result never depends on the input order.

    Parameters
    ----------
    y_true, y_pred : ndarray of shape (n_samples,)
        True and predicted labels (any comparable dtype).
    confidence : ndarray of shape (n_samples,), float
        Higher means more confident (e.g. the largest predicted probability).

    Returns
    -------
    coverage : ndarray of shape (n_samples,)
        ``k / n`` for ``k = 1..n``.
    risk : ndarray of shape (n_samples,)
        Error rate in ``[0, 1]`` among the ``k`` most confident samples.

    Raises
    ------
    ValueError
        Empty inputs, NaN/inf confidence, or mismatched lengths.
    """
    y_true, y_pred = _label_pair(y_true, y_pred)
    conf = finite_1d(confidence, "confidence")
    _same_length(("y_true", y_true), ("confidence", conf))
    errors = (y_true != y_pred).astype(float)
    n = conf.size
    order = np.argsort(-conf, kind="stable")
    conf_sorted, err_sorted = conf[order], errors[order]
    # Tie groups in the sorted order: start index of each run of equal confidence.
    starts = np.flatnonzero(np.r_[True, conf_sorted[1:] != conf_sorted[:-1]])
    sizes = np.diff(np.r_[starts, n])
    group_err = np.add.reduceat(err_sorted, starts)
    errors_before = np.r_[0.0, np.cumsum(group_err)[:-1]]
    group_of = np.repeat(np.arange(starts.size), sizes)
    position_in_group = np.arange(n) - starts[group_of] + 1
    cum_errors = errors_before[group_of] + position_in_group * group_err[group_of] / sizes[group_of]
    k = np.arange(1, n + 1)
    return k / n, cum_errors / k


def aurc(y_true: np.ndarray, y_pred: np.ndarray, confidence: np.ndarray) -> float:
    """Area under the selective risk-coverage curve, on the 0-100 scale (paper Table 1).

    The mean of the risks of :func:`risk_coverage_curve` over the ``n`` coverage levels
    ``1/n, ..., 1`` (a right Riemann sum), times 100. Lower is better; a constant confidence
    gives ``100 * error rate``. Ties: see :func:`risk_coverage_curve`.

    Parameters
    ----------
    y_true, y_pred : ndarray of shape (n_samples,)
    confidence : ndarray of shape (n_samples,), float
        Higher means more confident.

    Returns
    -------
    float
        AURC in ``[0, 100]``.

    Raises
    ------
    ValueError
        As :func:`risk_coverage_curve`.
    """
    _, risk = risk_coverage_curve(y_true, y_pred, confidence)
    return float(100.0 * risk.mean())


def expected_calibration_error(y_true: np.ndarray, proba: np.ndarray, n_bins: int = 15) -> float:
    """Top-label expected calibration error with equal-width confidence bins.

    The confidence is ``max_c proba[i, c]`` and the prediction its arg-max (first index on ties).
    Bins are ``[0, 1/B), [1/B, 2/B), ..., [(B-1)/B, 1]`` with ``B = n_bins`` (default 15);
    ``ECE = sum_b |b| / n * |accuracy(b) - mean confidence(b)|`` over non-empty bins.

    Parameters
    ----------
    y_true : ndarray of shape (n_samples,), int
        Class indices in ``[0, n_classes)``.
    proba : ndarray of shape (n_samples, n_classes), float in [0, 1]
        Predicted class probabilities.
    n_bins : int, default=15
        Number of equal-width bins (>= 1).

    Returns
    -------
    float
        ECE in ``[0, 1]`` (multiply by 100 for the paper's Table 8 scale).

    Raises
    ------
    ValueError
        Empty inputs, NaN, probabilities outside [0, 1], mismatched shapes, bad ``n_bins``.
    """
    proba = np.asarray(proba, dtype=float)
    if proba.ndim != 2 or proba.shape[0] == 0 or proba.shape[1] == 0:
        raise ValueError(f"proba must be a non-empty (n_samples, n_classes) matrix: {proba.shape}")
    if not np.all(np.isfinite(proba)):
        raise ValueError("proba contains NaN or inf")
    if proba.min() < 0.0 or proba.max() > 1.0:
        raise ValueError("proba has values outside [0, 1]")
    if int(n_bins) != n_bins or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer, got {n_bins}")
    y = _labels(y_true, "y_true", proba.shape[1])
    _same_length(("y_true", y), ("proba", proba))
    conf = proba.max(axis=1)
    correct = (proba.argmax(axis=1) == y).astype(float)
    bins = np.minimum((conf * n_bins).astype(np.int64), n_bins - 1)
    acc_sum = np.bincount(bins, weights=correct, minlength=n_bins)
    conf_sum = np.bincount(bins, weights=conf, minlength=n_bins)
    return float(np.abs(acc_sum - conf_sum).sum() / conf.size)


# --------------------------------------------------------------------------- set-valued outputs
def coverage(y_true: np.ndarray, sets: np.ndarray) -> float:
    """Empirical set coverage in ``[0, 1]``: fraction of samples whose true class is in the set.

    Parameters
    ----------
    y_true : ndarray of shape (n_samples,), int in [0, n_classes)
    sets : ndarray of shape (n_samples, n_classes), bool

    Raises
    ------
    ValueError
        Empty or non-boolean sets, labels out of range, mismatched lengths.
    """
    sets = _sets(sets)
    y = _labels(y_true, "y_true", sets.shape[1])
    _same_length(("y_true", y), ("sets", sets))
    return float(sets[np.arange(y.size), y].mean())


def determinacy(sets: np.ndarray) -> float:
    """Fraction of singleton sets in ``[0, 1]`` (paper §4.1).

    Parameters
    ----------
    sets : ndarray of shape (n_samples, n_classes), bool

    Raises
    ------
    ValueError
        Empty or non-boolean sets.
    """
    return float((_sets(sets).sum(axis=1) == 1).mean())


def mean_set_size(sets: np.ndarray) -> float:
    """Mean set cardinality in ``[0, n_classes]`` (an empty set counts 0).

    ``sets`` is read and checked as in :func:`determinacy`.
    """
    return float(_sets(sets).sum(axis=1).mean())


def utility_discounted_accuracy(y_true: np.ndarray, sets: np.ndarray, kind: str = "u65") -> float:
    """Utility-discounted accuracy of Zaffalon, Corani & Mauá (2012).

    Each sample scores ``u(S) = a / |S| - b / |S|**2`` when its true class is in ``S`` and 0
    otherwise (also 0 for an empty set), with ``(a, b) = (1.6, 0.6)`` for u65 and ``(2.2, 1.2)``
    for u80; a correct singleton scores 1, a correct pair ``0.65`` (u65) or ``0.80`` (u80).

    Parameters
    ----------
    y_true : ndarray of shape (n_samples,), int in [0, n_classes)
    sets : ndarray of shape (n_samples, n_classes), bool
    kind : {"u65", "u80"}, default="u65"

    Returns
    -------
    float
        Mean utility in ``[0, 1]``.

    Raises
    ------
    ValueError
        Unknown ``kind``, or as :func:`coverage`.
    """
    if kind not in _UTILITY_PARAMS:
        raise ValueError(f"kind must be one of {sorted(_UTILITY_PARAMS)}, got {kind!r}")
    a, b = _UTILITY_PARAMS[kind]
    sets = _sets(sets)
    y = _labels(y_true, "y_true", sets.shape[1])
    _same_length(("y_true", y), ("sets", sets))
    size = sets.sum(axis=1).astype(float)
    hit = sets[np.arange(y.size), y]
    safe = np.where(size > 0, size, 1.0)
    utility = np.minimum(a / safe - b / safe**2, 1.0)  # exactly 1 for singletons (rounding)
    return float(np.where(hit, utility, 0.0).mean())


def u65(y_true: np.ndarray, sets: np.ndarray) -> float:
    """u65 utility-discounted accuracy; see :func:`utility_discounted_accuracy`."""
    return utility_discounted_accuracy(y_true, sets, "u65")


def u80(y_true: np.ndarray, sets: np.ndarray) -> float:
    """u80 utility-discounted accuracy; see :func:`utility_discounted_accuracy`."""
    return utility_discounted_accuracy(y_true, sets, "u80")
