"""Per-leaf weighted moments split over the cross-fitting folds, and their fold-out sums (numba),
for the compiled fit of the leaf Gaussians (`ferl.novelty.leaf_fit`).

A leaf's sums are taken per fold on rows centred at the leaf's mean, so the moments without fold
``k`` cost no pass over the rows: the totals minus the fold's sums, or, where the fold holds more
than half the weight (the difference would cancel to rounding noise), the other folds' sums.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["diagonal_fold_moments", "fold_moments", "fold_out", "fold_totals", "leaf_weight",
           "moment_buffers"]


@njit(cache=True)
def leaf_weight(sw, entries, rows, phi0):
    """Soft count of a node: the sum of ``phi0 * sw`` over its positive entries (as `fold_moments`
    sums it)."""
    count = 0.0
    for q in entries:
        w = phi0[q] * sw[rows[q]]
        if w > 0.0:
            count += w
    return count


@njit(cache=True)
def fold_moments(U, sw, entries, rows, phi0, fold, n_folds, count_out, mean_out, s1, s2, full):
    """Weighted count and mean of a node's rows (all of them) and, on rows centred at that mean, the
    sums ``s0, s1, s2`` of each fold (row ``r`` in fold ``fold[r]``); of ``s2`` the lower triangle
    when ``full``, else its diagonal only. Returns ``s0`` of shape (n_folds,)."""
    d = U.shape[1]
    s0 = np.zeros(n_folds)
    s1[:] = 0.0
    if full:
        s2[:] = 0.0
    else:
        for k in range(n_folds):
            for f in range(d):
                s2[k, f, f] = 0.0
    mean_out[:] = 0.0
    count = 0.0
    for q in entries:
        r = rows[q]
        w = phi0[q] * sw[r]
        if w > 0.0:
            count += w
            for f in range(d):
                mean_out[f] += w * U[r, f]
    if count > 0.0:
        mean_out /= count
    z = np.empty(d)
    for q in entries:
        r = rows[q]
        w = phi0[q] * sw[r]
        if w <= 0.0:
            continue
        k = fold[r]
        s0[k] += w
        for f in range(d):
            z[f] = U[r, f] - mean_out[f]
            s1[k, f] += w * z[f]
        if not full:
            for f in range(d):
                s2[k, f, f] += w * z[f] * z[f]
            continue
        for f in range(d):
            wz = w * z[f]
            for g in range(f + 1):
                s2[k, f, g] += wz * z[g]
    count_out[0] = count
    return s0


@njit(cache=True, inline="always")
def _without(v, k):
    """Sum of ``v`` (one value per fold) over the folds other than ``k``, in fold order (all of them
    when ``k`` is -1)."""
    acc = 0.0
    for j in range(v.shape[0]):
        if j != k:
            acc += v[j]
    return acc


@njit(cache=True)
def fold_totals(s1, s2, own, t1, t2):
    """Sums over the folds of ``s1`` into ``t1`` and of ``s2`` into ``t2`` (its lower triangle when
    ``own``, else its diagonal)."""
    d = s1.shape[1]
    for f in range(d):
        t1[f] = _without(s1[:, f], -1)
        for g in range(f + 1):
            if g == f or own:
                t2[f, g] = _without(s2[:, f, g], -1)


@njit(cache=True)
def fold_out(s0, s1, s2, t1, t2, total, k, own, o1, o2):
    """The sums without fold ``k``: of ``s1`` into ``o1``, of ``s2`` into ``o2`` (its lower triangle
    when ``own``, else its diagonal); returns that of ``s0``. The totals ``total``, ``t1``, ``t2``
    minus the fold's sums, or, when the fold holds more than half the weight, the sums of the other
    folds: there the difference cancels to rounding noise (a fold holding all but 1e-100 of a leaf's
    weight gave a fold-out Gaussian of noise whose NLLs overflowed). Only one fold can hold more
    than half the weight, so this costs one more pass over the fold sums at most."""
    d = s1.shape[1]
    direct = s0[k] > 0.5 * total
    for f in range(d):
        o1[f] = _without(s1[:, f], k) if direct else t1[f] - s1[k, f]
        for g in range(f + 1):
            if g == f or own:
                o2[f, g] = _without(s2[:, f, g], k) if direct else t2[f, g] - s2[k, f, g]
    return _without(s0, k) if direct else total - s0[k]


@njit(cache=True)
def moment_buffers(n_folds, d):
    """Buffers of `fold_moments`, `fold_totals` and `fold_out`: count (1,), mean (d,), fold sums s1
    (n_folds, d) and s2 (n_folds, d, d), their totals t1 (d,) and t2 (d, d), the sums without a
    fold o1 (d,) and o2 (d, d)."""
    return (np.empty(1), np.empty(d), np.empty((n_folds, d)), np.empty((n_folds, d, d)), np.empty(d),
            np.empty((d, d)), np.empty(d), np.empty((d, d)))


@njit(cache=True)
def diagonal_fold_moments(U, sw, entries, rows, phi0, fold, n_folds, mean, s1, s2):
    """A node's weighted mean (into ``mean``) on all its rows and, per fold, on rows centred at that
    mean, the sums of the weights, of ``z`` (``s1``) and of ``z^2`` (``s2``, the diagonal of
    `fold_moments`' second moments), each (n_folds, d). Returns the fold weights (n_folds,) and the
    total weight. The diagonal leaf Gaussians' and the free-feature Gaussians' moments."""
    d = U.shape[1]
    s0 = np.zeros(n_folds)
    s1[:] = 0.0
    s2[:] = 0.0
    mean[:] = 0.0
    total = 0.0
    for q in entries:
        w = phi0[q] * sw[rows[q]]
        if w > 0.0:
            total += w
            mean += w * U[rows[q]]
    if total > 0.0:
        mean /= total
    for q in entries:
        r = rows[q]
        w = phi0[q] * sw[r]
        if w > 0.0:
            k = fold[r]
            s0[k] += w
            for f in range(d):
                z = U[r, f] - mean[f]
                s1[k, f] += w * z
                s2[k, f] += w * z * z
    return s0, total
