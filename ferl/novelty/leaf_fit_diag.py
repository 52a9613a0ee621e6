"""Diagonal leaf Gaussians for inputs wider than the training rows (numba; beyond the paper).

With fewer training rows of positive weight than features (``n < d``: bag-of-words, embeddings,
a handful of labelled rows) the pooled within-leaf scatter has rank below ``d``: the correlations
of `ferl.novelty.typicality` are the ridge's, not the data's, yet they cost ``d x d`` memory per
covariance and ``d^3`` time (the ZCA whitening's eigendecomposition, the cross-fit's Choleskys),
so that a fit on two rows grew with the cube of the width (docs/results/speed.md, *Wide inputs*).
There every leaf keeps the same shrunk *variances* as the full model (its own, shrunk to the pooled
within-leaf variances with ``a_l = n_l / (n_l + KAPPA d)``, plus ``RIDGE``) and no correlations:
``Sigma_l`` is diagonal, its ZCA-cor whitening ``V^{-1/2}``, its log-det shared out exactly as
``t_lf / 2`` (``log R = 0``). Fit, model and read-out are then linear in ``d`` at fixed ``n``
(``python scripts/bench_wide.py``, docs/results/speed.md). The rule (`diagonal_leaves`) depends on
the data's shape only, so every fit with at least as many rows as features is unchanged, bit for bit.

`diagonal_fit_kernel` returns what `ferl.novelty.leaf_fit.fit_kernel` returns, with covariances as
their diagonals (L, d), and the cross-fitted NLLs in the same order (leaves depth first, a leaf's
rows in firing order), so the reliability and the path residual pair up as in the full model.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ferl.novelty.fold_moments import diagonal_fold_moments
from ferl.novelty.leaf_fit import depth_first

__all__ = ["diagonal_fit_kernel", "diagonal_leaves"]


def diagonal_leaves(sample_weight: np.ndarray, n_features: int) -> bool:
    """Whether the leaf Gaussians are diagonal: fewer training rows of positive weight than features."""
    return int(np.count_nonzero(np.asarray(sample_weight) > 0)) < n_features


@njit(cache=True)
def _moments(s0, s1, s2, total, k, o1, o2):
    """Slot ``k`` of the moments: 0 all rows, ``1 + j`` without fold ``j``. Into ``o1`` the sum of the
    centred rows less the node's mean (0 for all rows), into ``o2`` the sums of squares; returns the
    weight. Where fold ``j`` holds more than half the weight the other folds are added up instead of
    subtracted from the totals, whose difference would cancel to rounding noise (as
    `ferl.novelty.fold_moments.fold_out`)."""
    j = k - 1
    if j >= 0 and s0[j] <= 0.5 * total:
        o1[:] = s1.sum(axis=0) - s1[j]
        o2[:] = s2.sum(axis=0) - s2[j]
        return total - s0[j]
    o1[:] = 0.0
    o2[:] = 0.0
    weight = 0.0
    for i in range(s0.shape[0]):
        if i != j:
            o1 += s1[i]
            o2 += s2[i]
            weight += s0[i]
    if j < 0:  # all rows: centred at their own mean, weighed as they were summed
        o1[:] = 0.0
        return total
    return weight


@njit(cache=True)
def diagonal_fit_kernel(U, sw, start, count, rows, phi0, feature, left, right, parent, leaf_index, kappa_d,
                        ridge, fold, n_folds):
    """Leaf means, diagonal covariances (ridge included) and the cross-fitted leaf NLLs.

    Parameters and returns as `ferl.novelty.leaf_fit.fit_kernel` (without ``support_d``: no leaf has
    correlations), except ``cov`` of shape (L, d): the variances.
    """
    n, d = U.shape
    n_nodes = feature.shape[0]
    K1 = n_folds + 1
    depth = np.zeros(n_nodes, dtype=np.int64)
    for o in range(1, n_nodes):
        depth[o] = depth[parent[o]] + 1
    s1, s2 = np.empty((n_folds, d)), np.empty((n_folds, d))
    o1, o2, node_mean = np.empty(d), np.empty(d), np.empty(d)
    # the pooled within-leaf variances on all rows (0) and without each fold (1 + k)
    pooled = np.zeros((K1, d))
    weight = np.zeros(K1)
    n_leaves, n_values = 0, 0
    for o in range(n_nodes):
        if feature[o] >= 0:
            continue
        n_leaves += 1
        n_values += count[o]
        entries = np.arange(start[o], start[o] + count[o])
        s0, total = diagonal_fold_moments(U, sw, entries, rows, phi0, fold, n_folds, node_mean, s1, s2)
        if total <= 0.0:
            continue
        for k in range(K1):
            cnt = _moments(s0, s1, s2, total, k, o1, o2)
            if cnt > 0.0:  # the scatter about the fold-out mean
                weight[k] += cnt
                pooled[k] += o2 - o1 * o1 / cnt
    for k in range(K1):
        if weight[k] > 0.0:
            pooled[k] = np.maximum(pooled[k] / weight[k], 0.0)
        else:  # no leaf has weight: unit variances
            pooled[k] = 1.0
    bm = np.zeros((depth.max() + 2, K1, d))  # per depth, the mean of the node on the current path
    var = np.empty((K1, d))
    leaf_mean, leaf_var = np.empty((n_leaves, d)), np.empty((n_leaves, d))
    values, weights, term = np.empty(n_values), np.empty(n_values), np.zeros(n)
    m = 0
    log_ridge = 0.5 * d * np.log(ridge)
    for o in depth_first(feature, left, right):
        t = depth[o] + 1
        leaf = feature[o] < 0
        entries = np.arange(start[o], start[o] + count[o])
        s0, total = diagonal_fold_moments(U, sw, entries, rows, phi0, fold, n_folds, node_mean, s1, s2)
        for k in range(K1):
            cnt = _moments(s0, s1, s2, total, k, o1, o2) if total > 0.0 else 0.0
            if cnt <= 0.0:  # no weight: the parent's mean and the pooled variances
                bm[t, k] = bm[t - 1, k]
                var[k] = pooled[k]
                continue
            shift = o1 / cnt  # the fold-out mean minus the node's mean
            bm[t, k] = node_mean + shift
            a = cnt / (cnt + kappa_d)
            var[k] = np.maximum(a * (o2 / cnt - shift * shift) + (1.0 - a) * pooled[k], 0.0)
        if not leaf:
            continue
        j = leaf_index[o]
        leaf_mean[j] = bm[t, 0]
        leaf_var[j] = var[0] + ridge
        for q in entries:  # out-of-fold NLL of every row of positive weight
            r = rows[q]
            w = phi0[q] * sw[r]
            if w <= 0.0:
                continue
            k = 1 + fold[r]
            acc, half = 0.0, -log_ridge
            for f in range(d):
                s = np.sqrt(var[k, f] + ridge)
                v = (U[r, f] - bm[t, k, f]) / s
                acc += v * v
                half += np.log(s)
            values[m] = 0.5 * acc + max(half, 0.0)
            weights[m] = w
            term[r] += phi0[q] * values[m]
            m += 1
    return leaf_mean, leaf_var, values[:m], weights[:m], term
