"""Free-feature Gaussians of paper eq. 3: per node, a firing-weighted Gaussian of every feature off
the node's root-to-node path, with a variance floor; and the fit-time check that keeps every
novelty score finite on any feature scale. Read by `ferl.novelty.scores`, which re-exports these names.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ferl.tree.firing import Firing
from ferl.tree.fuzzy_tree import FuzzyTree

__all__ = ["MIN_VARIANCE", "VAR_FLOOR", "check_variances", "fit_free_gaussians", "free_gaussians",
           "weighted_moments"]

#: Variance floor of the free-feature Gaussians, as a fraction of the feature's training variance
#: (a feature constant over the whole training set uses 1 instead of its variance): a feature
#: constant within a node gets ``sigma^2 = VAR_FLOOR * var_f`` and hence a finite score. The
#: leave-one-class-out ranking hardly depends on it between 1e-3 and 1e-1 (docs/results/novelty.md).
VAR_FLOOR = 1e-2
#: Smallest training variance of a non-constant feature that `fit` accepts: below it the floored
#: variance would leave float64's normal range (a feature scaled by 1e-160 gave inf / NaN scores).
MIN_VARIANCE = np.finfo(np.float64).tiny / VAR_FLOOR


@njit(cache=True)
def weighted_moments(X, sw, shift, unit, total):
    """Weighted mean and standard deviation per feature of ``V = (X - shift) / unit``, without a
    copy of ``X``: the values of ``np.average(V, axis=0, weights=sw)`` and ``sqrt(np.average((V -
    mean) ** 2, axis=0, weights=sw))``, bit for bit (rows summed in order, as numpy reduces axis 0),
    except that rows of weight 0 are skipped (numpy gives NaN where such a row's value overflows).

    Parameters
    ----------
    X : ndarray of shape (n, d), float64
    sw : ndarray of shape (n,), float64, >= 0
    shift, unit : ndarray of shape (d,), float64 (``unit`` non-zero)
    total : float
        ``sw.sum()`` (> 0).

    Returns
    -------
    mean, sd : ndarray of shape (d,), float64 (inf or NaN where a sum overflows)
    """
    n, d = X.shape
    acc = np.zeros(d)
    for i in range(n):
        if sw[i] == 0.0:  # adds nothing, but 0 * inf (a huge value of weight 0) is NaN
            continue
        for f in range(d):
            acc[f] += (X[i, f] - shift[f]) / unit[f] * sw[i]
    mean = acc / total
    acc[:] = 0.0
    for i in range(n):
        if sw[i] == 0.0:
            continue
        for f in range(d):
            z = (X[i, f] - shift[f]) / unit[f] - mean[f]
            acc[f] += z * z * sw[i]
    return mean, np.sqrt(acc / total)


@njit(cache=True)
def _node_sums(start, count, rows, phi0, sw, X, center, scale):
    """Per node, the weighted count, sum and sum of squares of the standardised ``(X - center) /
    scale`` over the entries that reach it (standardised row by row: no copy of ``X``)."""
    n_nodes = start.shape[0]
    d = X.shape[1]
    s0 = np.zeros(n_nodes)
    s1 = np.zeros((n_nodes, d))
    s2 = np.zeros((n_nodes, d))
    for o in range(n_nodes):
        for q in range(start[o], start[o] + count[o]):
            r = rows[q]
            w = phi0[q] * sw[r]
            if w == 0.0:  # adds nothing, but 0 * inf (a huge value of weight 0) is NaN
                continue
            s0[o] += w
            for f in range(d):
                z = (X[r, f] - center[f]) / scale[f]
                s1[o, f] += w * z
                s2[o, f] += w * z * z
    return s0, s1, s2


def fit_free_gaussians(tree: FuzzyTree, X: np.ndarray, sample_weight: np.ndarray,
                       firing: Firing | None = None) -> FuzzyTree:
    """Fit the per-node free-feature Gaussians of paper eq. 3 and store them in ``tree``.

    The weights ``w_i phi_o(x_i)`` (sample weight times training firing, gates off: equal to the
    gated firing on the training set) give the mean ``mu_of`` and population variance
    ``sigma_of^2`` of every feature ``f`` absent from node ``o``'s path (path features: NaN). Sums
    are accumulated on standardised features over the sparse firing (`ferl.tree.firing.Firing`), each
    row standardised as it is read (no copy of ``X``).

    Parameters
    ----------
    tree : FuzzyTree
        A finalised tree; ``tree.free_mean`` and ``tree.free_var`` are set in place.
    X : ndarray of shape (n_samples, n_features), float64, finite
        The training inputs.
    sample_weight : ndarray of shape (n_samples,), float64, >= 0
    firing : Firing, optional
        The sparse firing of ``X`` (its ungated ``phi0`` is read), when the caller has it already;
        computed otherwise.

    Returns
    -------
    FuzzyTree
        ``tree``, with ``free_mean`` and ``free_var`` of shape (n_nodes, n_features), float64
        (infinite or NaN where a variance overflows: `check_variances` rejects those).
    """
    n, d = X.shape
    sw = np.asarray(sample_weight, dtype=np.float64)
    if firing is None:
        firing = tree.sparse_firing(X, False, np.ones(tree.n_nodes))
    X = np.ascontiguousarray(X, dtype=np.float64)
    # the mean as an offset from the heaviest row: a row holding all but 1e-150 of the weight
    # sits exactly at the centre, not at the mean's rounding error (which outweighs the spread)
    ref = X[np.argmax(sw)]
    offset, scale = weighted_moments(X, sw, ref, np.ones(d), sw.sum())
    center = ref + offset
    scale = np.where(scale > 0, scale, 1.0)
    s0, s1, s2 = _node_sums(firing.start, firing.count, firing.rows, firing.phi0, sw, X, center, scale)
    with np.errstate(over="ignore", invalid="ignore"):
        total = np.where(s0 > 0, s0, 1.0)[:, None]
        mean_z = s1 / total
        var_z = np.maximum(s2 / total - mean_z**2, 0.0)
        path = tree.path_mask(d)
        tree.free_mean = np.where(path, np.nan, center + scale * mean_z)
        tree.free_var = np.where(path, np.nan, scale**2 * var_z)
    return tree


def check_variances(tree: FuzzyTree, feature_range: np.ndarray, feature_names) -> None:
    """Raise ValueError naming the features whose training variance float64 cannot hold.

    A non-constant feature (``feature_range`` lo < hi) needs a finite root variance of at least
    `MIN_VARIANCE`; with it every novelty score is finite for every finite input.

    Parameters
    ----------
    tree : FuzzyTree
        With free-feature Gaussians (`fit_free_gaussians`).
    feature_range : ndarray of shape (n_features, 2)
        Training minimum and maximum per feature.
    feature_names : sequence of str
    """
    root_mean, root_var = tree.free_mean[0], tree.free_var[0]
    varies = feature_range[:, 1] > feature_range[:, 0]
    bad = ~np.isfinite(root_mean) | ~np.isfinite(root_var) | (varies & ~(root_var >= MIN_VARIANCE))
    if bad.any():
        names = [feature_names[j] for j in np.flatnonzero(bad)]
        values = ", ".join(f"{v:.3g}" for v in root_var[bad][:10])
        raise ValueError(
            f"the variance of feature(s) {names[:10]} ({values}) overflows or underflows float64 "
            f"(it must be finite and at least {MIN_VARIANCE:.3g} for finite novelty scores); rescale X "
            f"(e.g. standardise it) before fitting"
        )


def free_gaussians(tree: FuzzyTree) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Free-feature means and inverse standard deviations floored at `VAR_FLOOR` times the root's variance
    (n_nodes, d; 0 at path features), the free mask (n_nodes, d) and count per node (kept on the tree)."""
    return tree.derived("free_gaussians", (tree.free_mean, tree.free_var), lambda: _inverse_sd(tree))


def _inverse_sd(tree: FuzzyTree) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    free = ~np.isnan(tree.free_var)
    root_var = tree.free_var[0]
    floor = np.maximum(VAR_FLOOR * np.where(root_var > 0, root_var, 1.0), np.finfo(np.float64).tiny)
    var = np.maximum(np.where(free, tree.free_var, 1.0), floor)
    inv_sd = np.where(free, 1.0 / np.sqrt(var), 0.0)
    return np.where(free, tree.free_mean, 0.0), inv_sd, free, free.sum(axis=1).astype(np.int64)
