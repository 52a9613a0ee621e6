"""Cross-fitting of the novelty models' training references (numba; beyond the paper): the folds,
the order the cross-fitted values come in, and the per-fold moments of a node's rows.

The reliability of the leaf Gaussians and the reference of the evidence discount score every
training row on Gaussians fitted without it (`ferl.novelty.leaf_gaussians.fit_leaf_gaussians`): the
``j``-th row of positive weight is in fold ``j % CROSS_FIT``, and the leaves are taken depth first
(`depth_first`), so the leaf NLLs (`ferl.novelty.leaf_fit`) and the path residual
(`cross_fitted_path_residual`, `walk_block`) pair up value for value.

A node's sums are taken per fold on rows centred at the node's mean, so the moments without fold
``k`` cost no pass over the rows: the totals minus the fold's sums, or, where the fold holds more
than half the weight (the difference would cancel to rounding noise), the other folds' sums
(`fold_out`). The pooled within-leaf covariance (`ferl.novelty.leaf_moments.pooled_covariance`) is
built from them, on all rows and without each fold.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["CROSS_FIT", "MOMENT_BLOCK", "WALK_BLOCK", "cross_fitted_path_residual", "depth_first",
           "diagonal_fold_moments", "fold_moments", "fold_out", "fold_totals", "in_fold", "leaf_weight",
           "moment_buffers", "walk_block", "weighted_quantile"]

#: Interleaved folds of the cross-fitted references: the ``j``-th row of positive weight is in fold
#: ``j % CROSS_FIT``, so that rows of weight 0 change nothing.
CROSS_FIT = 5
#: Rows of a fold whose full second moments are added up together (`fold_moments`).
MOMENT_BLOCK = 32
#: Inputs whose path residuals are taken together (`walk_block`).
WALK_BLOCK = 32


def weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """The ``q`` quantile of ``values`` (m,) weighted by ``weights`` (m,) >= 0 (some > 0): the first
    value, in increasing order, at which the cumulative weight reaches ``q`` of the total."""
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order])
    return float(values[order][min(np.searchsorted(cum, q * cum[-1]), values.size - 1)])


@njit(cache=True)
def depth_first(feature, left, right):
    """The nodes in depth-first order, left child first (pre-order: a parent before its subtree),
    int64 array of shape (n_nodes,); ``feature < 0`` marks a leaf. The order of the cross-fitted
    values of `fit_kernel` and of ``ferl.novelty.cross_fit.cross_fitted_path_residual``."""
    n_nodes = feature.shape[0]
    order = np.empty(n_nodes, dtype=np.int64)
    stack = np.empty(n_nodes, dtype=np.int64)
    stack[0] = 0
    top = 1
    m = 0
    while top > 0:
        top -= 1
        o = stack[top]
        order[m] = o
        m += 1
        if feature[o] >= 0:
            stack[top] = right[o]
            stack[top + 1] = left[o]
            top += 2
    return order[:m]


@njit(cache=True)
def walk_block(Z, nb, o, parent, mean, inv_sd, free, n_free, z_max, acc, out):
    """The paper's residual along leaf ``o``'s path (`ferl.novelty.free_gaussians.path_residual`) of
    the ``nb`` inputs in the columns of ``Z`` (d, block), into ``out[:nb]``: ``R_l(x)``, the mean
    over the path's nodes that have a free feature of ``r_o(x) = mean_{f free} z_of^2``, ``|z|``
    clipped to ``z_max``; >= 0 (0 when no node has a free feature).

    ``parent`` (n_nodes,): the tree; ``mean``, ``inv_sd`` (n_nodes, d): the free-feature Gaussians
    with their floored inverse standard deviations; ``free`` (n_nodes, d) bool and ``n_free``
    (n_nodes,): the free features of each node; ``acc`` (block,): a buffer. Each input's arithmetic
    is that of an input on its own, operation for operation: the inner loops run over the block's
    inputs, which are independent, so they vectorise without reordering any input's sums."""
    for j in range(nb):
        out[j] = 0.0
    m = 0
    while True:
        if n_free[o] > 0:
            for j in range(nb):
                acc[j] = 0.0
            for f in range(Z.shape[0]):
                if free[o, f]:
                    mu, s = mean[o, f], inv_sd[o, f]
                    for j in range(nb):
                        z = min(abs((Z[f, j] - mu) * s), z_max)
                        acc[j] += z * z
            for j in range(nb):
                out[j] += acc[j] / n_free[o]
            m += 1
        if o == 0:
            break
        o = parent[o]
    for j in range(nb):
        out[j] = out[j] / m if m > 0 else 0.0


@njit(cache=True)
def in_fold(fold, rows, pairs, n, k, out):
    """Positions ``i < n`` of the entries ``pairs[i]`` whose row is in fold ``k``, in order, into
    ``out``; returns how many."""
    n_k = 0
    for i in range(n):
        if fold[rows[pairs[i]]] == k:
            out[n_k] = i
            n_k += 1
    return n_k


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
def _add_block(s2, Z, w, nb):
    """Add ``w_i z_i z_i'`` (lower triangle) of the block's ``nb`` rows ``z_i = Z[i]`` (weights
    ``w``) into ``s2`` (d, d), row by row for each entry: the same floats as one row at a time, with
    a row of ``s2`` in the L1 cache across the block rather than all of ``s2`` read back from L2
    for every row."""
    for f in range(s2.shape[0]):
        for i in range(0, nb - nb % 4, 4):  # four rows per load and store of the entry, in their order
            a, b = w[i] * Z[i, f], w[i + 1] * Z[i + 1, f]
            c, e = w[i + 2] * Z[i + 2, f], w[i + 3] * Z[i + 3, f]
            for g in range(f + 1):
                s2[f, g] = s2[f, g] + a * Z[i, g] + b * Z[i + 1, g] + c * Z[i + 2, g] + e * Z[i + 3, g]
        for i in range(nb - nb % 4, nb):
            wz = w[i] * Z[i, f]
            for g in range(f + 1):
                s2[f, g] += wz * Z[i, g]


@njit(cache=True)
def _weighted_mean(U, sw, entries, rows, phi0, mean):
    """Into ``mean`` (d,) the weighted mean of a node's rows over its entries of positive weight
    ``phi0 * sw`` (left at 0 without any), summed in place in the entries' order; returns the weight."""
    mean[:] = 0.0
    total = 0.0
    for q in entries:
        r = rows[q]
        w = phi0[q] * sw[r]
        if w > 0.0:
            total += w
            for f in range(U.shape[1]):
                mean[f] += w * U[r, f]
    if total > 0.0:
        mean /= total
    return total


@njit(cache=True)
def fold_moments(U, sw, entries, rows, phi0, fold, n_folds, count_out, mean_out, s1, s2, full):
    """Weighted count and mean of a node's rows (all of them) and, on rows centred at that mean, the
    sums ``s0, s1, s2`` of each fold (row ``r`` in fold ``fold[r]``); of ``s2`` the lower triangle
    when ``full``, else its diagonal only. Returns ``s0`` of shape (n_folds,).

    The full second moments are added `MOMENT_BLOCK` rows of a fold at a time (`_add_block`), in
    the rows' order, so each entry's sum is the one of a row at a time."""
    d = U.shape[1]
    s0 = np.zeros(n_folds)
    s1[:] = 0.0
    if full:
        s2[:] = 0.0
    else:
        for k in range(n_folds):
            for f in range(d):
                s2[k, f, f] = 0.0
    count = _weighted_mean(U, sw, entries, rows, phi0, mean_out)
    # each fold's pending rows, centred, with their weights
    Z = np.empty((n_folds, MOMENT_BLOCK if full else 1, d))
    wb = np.empty((n_folds, MOMENT_BLOCK))
    nb = np.zeros(n_folds, dtype=np.int64)
    for q in entries:
        r = rows[q]
        w = phi0[q] * sw[r]
        if w <= 0.0:
            continue
        k = fold[r]
        s0[k] += w
        z = Z[k, nb[k]]
        for f in range(d):
            z[f] = U[r, f] - mean_out[f]
            s1[k, f] += w * z[f]
        if not full:
            for f in range(d):
                s2[k, f, f] += w * z[f] * z[f]
            continue
        wb[k, nb[k]] = w
        nb[k] += 1
        if nb[k] == MOMENT_BLOCK:
            _add_block(s2[k], Z[k], wb[k], MOMENT_BLOCK)
            nb[k] = 0
    if full:
        for k in range(n_folds):
            _add_block(s2[k], Z[k], wb[k], nb[k])
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
    total = _weighted_mean(U, sw, entries, rows, phi0, mean)
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


@njit(cache=True)
def _fold_out_gaussians(U, sw, start, count, rows, phi0, fold, n_folds, var_floor):
    """Free-feature means and floored inverse standard deviations of every node without each fold.

    Returns ``mean`` and ``inv_sd`` of shape (n_folds, n_nodes, d): the weighted mean and population
    variance of the rows outside fold ``k`` (row ``r`` in fold ``fold[r]``), on sums centred at
    the node's mean over all rows; the variance floored at ``var_floor`` times the fold-out root
    variance (1 for a feature constant there), as `ferl.novelty.free_gaussians` floors the full
    fit's. A node with no weight outside the fold keeps its overall mean and the floor.
    """
    n_nodes = start.shape[0]
    d = U.shape[1]
    mean = np.zeros((n_folds, n_nodes, d))
    inv_sd = np.zeros((n_folds, n_nodes, d))
    floor = np.ones((n_folds, d))
    s1 = np.zeros((n_folds, d))
    s2 = np.zeros((n_folds, d))
    center = np.zeros(d)
    for o in range(n_nodes):  # a parent precedes its children: the root comes first
        s0, total = diagonal_fold_moments(U, sw, np.arange(start[o], start[o] + count[o]), rows, phi0, fold,
                                          n_folds, center, s1, s2)
        for k in range(n_folds):
            out = total - s0[k]
            for f in range(d):
                var = 0.0
                shift = 0.0
                if out > 0.0:
                    shift = (s1[:, f].sum() - s1[k, f]) / out
                    var = max((s2[:, f].sum() - s2[k, f]) / out - shift * shift, 0.0)
                if o == 0:
                    floor[k, f] = var_floor * (var if var > 0.0 else 1.0)
                mean[k, o, f] = center[f] + shift
                inv_sd[k, o, f] = 1.0 / np.sqrt(max(var, floor[k, f], 1e-300))
    return mean, inv_sd


@njit(cache=True)
def cross_fitted_path_residual(U, sw, start, count, rows, phi0, feature, left, right, parent, free,
                               n_free, fold, n_folds, var_floor, z_max):
    """Out-of-fold ``R_l(x_i)`` of every (training row, leaf) pair of positive weight
    ``phi0 * sw``, in the order of `ferl.novelty.leaf_fit.fit_kernel`'s cross-fitted NLLs (leaves depth
    first, left child first; a leaf's rows in firing order), each row scored on the free-feature
    Gaussians refitted without its fold (`_fold_out_gaussians`).

    ``U`` (n, d): the training inputs, standardised (``z`` is invariant to it). Returns an ndarray
    of shape (m,), float64 >= 0.
    """
    mean, inv_sd = _fold_out_gaussians(U, sw, start, count, rows, phi0, fold, n_folds, var_floor)
    d = U.shape[1]
    n_values = 0
    for o in range(feature.shape[0]):
        if feature[o] < 0:
            n_values += count[o]
    values = np.empty(n_values)
    pairs = np.empty(count.max(), dtype=np.int64)
    members = np.empty_like(pairs)
    Z, acc, out = np.empty((d, WALK_BLOCK)), np.empty(WALK_BLOCK), np.empty(WALK_BLOCK)
    m = 0
    for o in depth_first(feature, left, right):
        if feature[o] >= 0:
            continue
        n_o = 0
        for e in range(start[o], start[o] + count[o]):  # the pairs of positive weight, in firing order
            if phi0[e] * sw[rows[e]] > 0.0:
                pairs[n_o] = e
                n_o += 1
        for k in range(n_folds):  # a fold's rows on the Gaussians without it, a block at a time
            n_k = in_fold(fold, rows, pairs, n_o, k, members)
            for b0 in range(0, n_k, WALK_BLOCK):
                nb = min(WALK_BLOCK, n_k - b0)
                for j in range(nb):
                    Z[:, j] = U[rows[pairs[members[b0 + j]]]]
                walk_block(Z, nb, o, parent, mean[k], inv_sd[k], free, n_free, z_max, acc, out)
                for j in range(nb):
                    values[m + members[b0 + j]] = out[j]
        m += n_o
    return values[:m]
