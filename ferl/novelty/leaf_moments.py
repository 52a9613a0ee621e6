"""The pooled within-leaf covariance and the supported leaves' moments kept from its pass (numba;
beyond the paper).

The pooled covariance (`pooled_covariance`), the leaf Gaussians' shrinkage target, takes every
leaf's fold moments (`ferl.novelty.cross_fit.fold_moments`) with their full second moments; the fit
(`ferl.novelty.leaf_fit.fit_kernel`) then needs the same moments again for each supported leaf (soft
count at least ``SUPPORT d``), after the pooled covariance is known. The ``d x d`` accumulation per
(row, leaf) pair is most of either pass, so the pooled pass keeps the supported leaves' moments
(`moment_slots`, `keep_moments`) and the fit reads them back (`restore_moments`): the same floats,
so the fit is the same bit for bit, without its second pass over the supported leaves' rows
(timings in docs/results/speed.md).

Memory: a kept leaf holds its count, mean and fold sums, the lower triangle of each fold's second
moments packed, ``8 (n_folds (d (d + 3) / 2 + 1) + d + 1)`` bytes. Leaves are kept in node order
while the total stays within the budget (`MOMENT_BUDGET`, ``64 * 2**20`` bytes: every leaf of a
tree of 200 at ``d = 112`` and 5 folds would fit; the store's size on the CUB-shaped tree is in
docs/results/speed.md); past it, a leaf's moments are taken again from its rows, as without the
store.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ferl.novelty.cross_fit import fold_moments, fold_out, fold_totals, leaf_weight, moment_buffers

__all__ = ["MOMENT_BUDGET", "keep_moments", "moment_slots", "pooled_covariance", "restore_moments"]

#: Bytes at most of the supported leaves' moments kept from the pooled pass for the leaf fit.
MOMENT_BUDGET = 64 * 2**20


@njit(cache=True)
def moment_slots(sw, start, count, rows, phi0, feature, support_d, d, n_folds, budget):
    """Which leaves are supported and where their moments are kept.

    Parameters
    ----------
    sw, start, count, rows, phi0, feature
        As `ferl.novelty.leaf_fit.fit_kernel`.
    support_d : float
        Soft count a leaf needs for correlations of its own (`ferl.novelty.cross_fit.leaf_weight`).
    d, n_folds : int
        Features and folds.
    budget : int
        Bytes at most of the kept moments.

    Returns
    -------
    own : ndarray of shape (n_nodes,), bool
        The supported leaves.
    slot : ndarray of shape (n_nodes,), int64
        Each supported leaf's place in the store, in node order while the store fits ``budget``; -1
        for the other nodes.
    store : tuple of ndarray
        The kept moments, one row per slot: counts (S,), means (S, d), fold weights (S, n_folds),
        fold sums (S, n_folds, d) and packed lower triangles of the second moments
        (S, n_folds, d (d + 1) / 2).
    """
    n_nodes = feature.shape[0]
    own = np.zeros(n_nodes, dtype=np.bool_)
    slot = np.full(n_nodes, -1, dtype=np.int64)
    per_leaf = 8 * (n_folds * (d * (d + 1) // 2 + d + 1) + d + 1)
    n_slots = 0
    for o in range(n_nodes):
        if feature[o] < 0:
            own[o] = leaf_weight(sw, np.arange(start[o], start[o] + count[o]), rows, phi0) >= support_d
            if own[o] and (n_slots + 1) * per_leaf <= budget:
                slot[o] = n_slots
                n_slots += 1
    store = (np.empty(n_slots), np.empty((n_slots, d)), np.empty((n_slots, n_folds)),
             np.empty((n_slots, n_folds, d)), np.empty((n_slots, n_folds, d * (d + 1) // 2)))
    return own, slot, store


@njit(cache=True)
def _copy_lower(s2, packed, into_packed):
    """The lower triangles of ``s2`` (n_folds, d, d) into ``packed`` (n_folds, d (d + 1) / 2), row by
    row, or (``into_packed`` False) back."""
    for k in range(s2.shape[0]):
        p = 0
        for f in range(s2.shape[1]):
            for g in range(f + 1):
                if into_packed:
                    packed[k, p] = s2[k, f, g]
                else:
                    s2[k, f, g] = packed[k, p]
                p += 1


@njit(cache=True)
def keep_moments(store, j, node_count, node_mean, s0, s1, s2):
    """Copy a leaf's moments (`ferl.novelty.cross_fit.fold_moments`, full) into slot ``j``."""
    count, mean, w, t1, tri = store
    count[j] = node_count[0]
    mean[j] = node_mean
    w[j] = s0
    t1[j] = s1
    _copy_lower(s2, tri[j], True)


@njit(cache=True)
def restore_moments(store, j, node_count, node_mean, s1, s2):
    """The moments of slot ``j`` back into `fold_moments`' buffers (the lower triangle of ``s2``);
    returns the fold weights ``s0``, as `fold_moments` does."""
    count, mean, w, t1, tri = store
    node_count[0] = count[j]
    node_mean[:] = mean[j]
    s1[:] = t1[j]
    _copy_lower(s2, tri[j], False)
    return w[j].copy()


@njit(cache=True)
def pooled_covariance(U, sw, start, count, rows, phi0, feature, fold, n_folds, slot, store):
    """The leaf Gaussians' shrinkage target (beyond the paper): the pooled within-leaf covariance on
    all rows (index 0) and without each fold (``1 + k``), shape (n_folds + 1, d, d), symmetric:
    every leaf's weighted scatter about its own mean, summed, over the summed soft counts; the
    identity where no leaf has weight. The moments of a leaf with a ``slot`` (`moment_slots`) are
    kept in ``store``."""
    d = U.shape[1]
    K1 = n_folds + 1
    P = np.zeros((K1, d, d))
    N = np.zeros(K1)
    node_count, node_mean, s1, s2, t1, t2, o1, o2 = moment_buffers(n_folds, d)
    shift = np.empty(d)
    for o in range(feature.shape[0]):
        if feature[o] >= 0:
            continue
        entries = np.arange(start[o], start[o] + count[o])
        s0 = fold_moments(U, sw, entries, rows, phi0, fold, n_folds, node_count, node_mean, s1, s2, True)
        if slot[o] >= 0:
            keep_moments(store, slot[o], node_count, node_mean, s0, s1, s2)
        total = node_count[0]
        if total <= 0.0:
            continue
        fold_totals(s1, s2, True, t1, t2)
        N[0] += total
        for f in range(d):
            for g in range(f + 1):
                P[0, f, g] += t2[f, g]
        for k in range(n_folds):  # the scatter about the fold-out mean: minus out0 shift shift'
            out0 = fold_out(s0, s1, s2, t1, t2, total, k, True, o1, o2)
            if out0 <= 0.0:
                continue
            N[1 + k] += out0
            for f in range(d):
                shift[f] = o1[f] / out0
            for f in range(d):
                for g in range(f + 1):
                    P[1 + k, f, g] += o2[f, g] - out0 * shift[f] * shift[g]
    for k in range(K1):
        for f in range(d):
            for g in range(f + 1):
                v = P[k, f, g] / N[k] if N[k] > 0.0 else (1.0 if f == g else 0.0)
                if g == f:
                    v = max(v, 0.0)  # rounding (weights spanning 1e300) cannot make it negative
                P[k, f, g] = P[k, g, f] = v
    return P
