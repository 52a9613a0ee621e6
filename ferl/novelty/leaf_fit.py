"""Compiled fit of the leaf Gaussians (`ferl.novelty.leaf_gaussians`): each leaf's moments with their
fold-out versions shrunk to the pooled within-leaf covariance, and the cross-fitted leaf NLLs
(numba; beyond the paper), with full covariances (`fit_kernel`) or, on inputs wider than the
training rows, diagonal ones (`diagonal_fit_kernel`).

Compiled passes replaced a per-node loop of numpy calls whose Python overhead dominated small trees
(the same values up to round-off; timings in docs/results/speed.md). Per leaf and fold the sums are
taken on rows centred at the leaf's mean, so a fold-out moment costs no pass over the rows
(`ferl.novelty.cross_fit`). The supported leaves' moments are taken once, in the pooled
covariance's pass, and read back (`ferl.novelty.leaf_moments`); memory beyond the outputs is one
set of moments, the pooled covariances and the kept moments (at most
`ferl.novelty.leaf_moments.MOMENT_BUDGET` bytes).

A leaf below ``SUPPORT d`` (`ferl.novelty.leaf_gaussians`) gets its mean and variances only (the
diagonal of its second moments) and the pooled correlations; its fold-out NLLs scale the row by the
leaf's own standard deviations and solve with the Cholesky factor of the pooled correlations,
factorised once per fold for all such leaves; that keeps the fit on a CUB-shaped set (``python
scripts/bench_scale.py --sections cub``: 6,000 rows, 112 concepts, 200 classes) within its fit-time
target (docs/results/speed.md).

A leaf's rows of one fold are solved `SOLVE_BLOCK` at a time (`_forward_sums`), each with the
operations of a solve of its own, so the NLLs are the same floats as row by row, in a fraction of
the time: a single row's substitution waits on its chain of subtractions, a block's runs in SIMD
lanes across its rows (docs/results/speed.md).

Why the pooled covariance rather than the parent's (each node shrunk to its parent along the
tree, small leaves borrowing their nearest supported ancestor's correlations): along the tree's
chain a small leaf is fitted to the mixture of classes above it, while the pooled covariance is the
within-class spread every leaf shares; it ranked held-out classes better on the synthetic open
world and CUB-50 and slightly worse on KEEL. ``SUPPORT`` keeps the fit within its fit-time target
on many classes (docs/results/speed.md), at a small cost in ranking on KEEL. Chosen by measurement
(``scripts/bench_openworld_novelty.py``, ``scripts/bench_novelty_tabular.py``):
docs/results/novelty.md, "The leaf Gaussians".

``SUPPORT = KAPPA / 2`` was chosen when the shrinkage target was the parent's covariance, against
``KAPPA`` and no ``SUPPORT``, with a refit on another bootstrap seed as the noise: the ``nll``
AUROCs on CUB-50, the synthetic open world and 10 KEEL sets stayed within a refit's noise, at a
fraction of the factorisations (figures in docs/results/novelty.md, "The leaf Gaussians").

**Diagonal leaf Gaussians.** With fewer training rows of positive weight than features (``n < d``:
bag-of-words, embeddings, a handful of labelled rows) the pooled within-leaf scatter has rank below
``d``: the correlations are the ridge's, not the data's, yet they cost ``d x d`` memory per
covariance and ``d^3`` time (the ZCA whitening's eigendecomposition, the cross-fit's Choleskys),
so that a fit on two rows grew with the cube of the width (docs/results/speed.md, *Wide inputs*).
There every leaf keeps the same shrunk *variances* as the full model (its own, shrunk to the pooled
within-leaf variances with ``a_l = n_l / (n_l + KAPPA d)``, plus ``RIDGE``) and no correlations:
``Sigma_l`` is diagonal, its ZCA-cor whitening ``V^{-1/2}``, its log-det shared out exactly as
``t_lf / 2`` (``log R = 0``). Fit, model and read-out are then linear in ``d`` at fixed ``n``
(``python scripts/bench_wide.py``, docs/results/speed.md). The rule (`diagonal_leaves`) depends on
the data's shape only, so every fit with at least as many rows as features is unchanged, bit for
bit. `diagonal_fit_kernel` returns what `fit_kernel` returns, with covariances as their diagonals
(L, d), and the cross-fitted NLLs in the same order (leaves depth first, a leaf's rows in firing
order), so the reliability and the path residual pair up as in the full model.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ferl.novelty.cross_fit import (
    depth_first,
    diagonal_fold_moments,
    fold_moments,
    fold_out,
    fold_totals,
    in_fold,
    moment_buffers,
)
from ferl.novelty.leaf_moments import moment_slots, pooled_covariance, restore_moments
from ferl.novelty.linalg import cholesky, correlation

__all__ = ["SOLVE_BLOCK", "diagonal_fit_kernel", "diagonal_leaves", "fit_kernel"]

#: Rows of a leaf and fold whose cross-fitted NLLs are solved together (`_forward_sums`).
SOLVE_BLOCK = 32


@njit(cache=True)
def _forward_sums(L, Z, V, norm, nb):
    """``norm[j] = ||v_j||^2`` with ``L v_j = z_j`` (forward substitution) for the ``nb`` columns
    ``z_j`` of ``Z`` (d, block), ``V`` the solutions. Row ``j``'s arithmetic is that of a solve on
    its own, operation for operation (the inner loops run over the block's rows, which are
    independent, so they vectorise without reordering any row's sums)."""
    d = L.shape[0]
    for j in range(nb):
        norm[j] = 0.0
    for f in range(d):
        for j in range(nb):
            V[f, j] = Z[f, j]
        for g in range(0, f - f % 4, 4):  # four terms per load and store of V's row, in their order
            a, b, c, e = L[f, g], L[f, g + 1], L[f, g + 2], L[f, g + 3]
            for j in range(nb):
                V[f, j] = V[f, j] - a * V[g, j] - b * V[g + 1, j] - c * V[g + 2, j] - e * V[g + 3, j]
        for g in range(f - f % 4, f):
            lfg = L[f, g]
            for j in range(nb):
                V[f, j] -= lfg * V[g, j]
        for j in range(nb):
            V[f, j] = V[f, j] / L[f, f]
            norm[j] += V[f, j] * V[f, j]


@njit(cache=True)
def fit_kernel(U, sw, start, count, rows, phi0, feature, left, right, parent, leaf_index, kappa_d,
               support_d, ridge, fold, n_folds, budget):
    """Leaf means and covariances (ridge included) and the cross-fitted leaf NLLs of the training rows,
    in one compiled depth-first pass over the nodes (`ferl.novelty.leaf_gaussians._fit_nodes` documents the
    model).

    Parameters
    ----------
    U : ndarray of shape (n, d), float64
        Standardised training inputs.
    sw : ndarray of shape (n,), float64 >= 0
        Sample weights.
    start, count, rows, phi0 : ndarray
        The ungated sparse firing (`ferl.tree.firing.Firing`) of every node.
    feature, left, right, parent : ndarray of shape (n_nodes,), int64
        The tree (a parent precedes its children; ``feature < 0`` marks a leaf).
    leaf_index : ndarray of shape (n_nodes,), int64
        Position of each leaf among the leaves, -1 elsewhere.
    kappa_d : float
        Pseudo-count of the shrinkage of a leaf's covariance to the pooled within-leaf covariance.
    support_d : float
        Soft count a leaf needs for correlations of its own; below it, the pooled ones.
    ridge : float
        Ridge added to a leaf's fold-out covariance before its NLLs.
    fold : ndarray of shape (n,), int64 in [0, n_folds)
        The fold of each row.
    n_folds : int
        Number of folds.
    budget : int
        Bytes at most of the supported leaves' moments kept from the pooled covariance's pass
        (`ferl.novelty.leaf_moments`); the others are taken again. The outputs do not depend on it.

    Returns
    -------
    mean : ndarray of shape (L, d)
    cov : ndarray of shape (L, d, d)
    values, weights : ndarray of shape (m,)
        Out-of-fold NLL of every (row, leaf) pair of positive weight, and that weight.
    term : ndarray of shape (n,)
        Out-of-fold ``T(x_i) = sum_l phi0_l(x_i) nll_l(x_i)`` of every row over its pairs of positive
        weight (0 for a row of weight 0): the reference of the evidence discount (`ferl.novelty.prototypes`).
    """
    n, d = U.shape
    n_nodes = feature.shape[0]
    depth = np.zeros(n_nodes, dtype=np.int64)
    for o in range(1, n_nodes):  # a parent always precedes its children
        depth[o] = depth[parent[o]] + 1
    n_leaves = 0
    n_values = 0
    for o in range(n_nodes):
        if feature[o] < 0:
            n_leaves += 1
            n_values += count[o]
    K1 = n_folds + 1
    own_leaf, slot, store = moment_slots(sw, start, count, rows, phi0, feature, support_d, d, n_folds, budget)
    pooled = pooled_covariance(U, sw, start, count, rows, phi0, feature, fold, n_folds, slot, store)
    # the small leaves' correlations: the pooled ones (ridge added); per fold, their Cholesky factor
    A = np.empty((d, d))
    corr = np.empty((d, d))
    correlation(pooled[0], ridge, corr)
    shared = np.empty((n_folds, d, d))
    shared_half = np.zeros(n_folds)
    for k in range(n_folds):
        shared[k] = cholesky(A, correlation(pooled[1 + k], ridge, A))
        for f in range(d):
            shared_half[k] += np.log(shared[k, f, f])
    # per depth, the mean of the node on the current path, on all rows (index 0) and without each
    # fold (1 + k); a node without weight takes its parent's
    bm = np.zeros((depth.max() + 2, K1, d))
    leaf_mean = np.empty((n_leaves, d))
    leaf_cov = np.empty((n_leaves, d, d))
    values = np.empty(n_values)
    weights = np.empty(n_values)
    term = np.zeros(n)
    m = 0
    node_count, node_mean, s1, s2, t1, t2, o1, o2 = moment_buffers(n_folds, d)
    var = np.empty((K1, d))  # a small leaf's shrunk variances
    full = np.empty((K1, d, d))  # a supported leaf's shrunk covariance
    sd = np.empty(d)
    pairs = np.empty(count.max(), dtype=np.int64)
    members = np.empty_like(pairs)
    Z = np.empty((d, SOLVE_BLOCK))  # a block of centred rows, feature-major
    V = np.empty((d, SOLVE_BLOCK))
    norm = np.empty(SOLVE_BLOCK)
    log_ridge = 0.5 * d * np.log(ridge)
    for o in depth_first(feature, left, right):
        t = depth[o] + 1  # this node's slot; its parent's is t - 1
        leaf = feature[o] < 0
        entries = np.arange(start[o], start[o] + count[o])
        own = own_leaf[o]  # decided on all rows
        if slot[o] >= 0:  # kept from the pooled covariance's pass
            s0 = restore_moments(store, slot[o], node_count, node_mean, s1, s2)
        else:
            s0 = fold_moments(U, sw, entries, rows, phi0, fold, n_folds, node_count, node_mean, s1, s2, own)
        total = node_count[0]
        fold_totals(s1, s2, own, t1, t2)
        for k in range(K1):  # k = 0: all rows; 1 + k: without fold k (`fold_out`)
            cnt = total if k == 0 else fold_out(s0, s1, s2, t1, t2, total, k - 1, own, o1, o2)
            if cnt <= 0.0:  # no weight: the parent's mean and, for a leaf, the pooled covariance
                bm[t, k] = bm[t - 1, k]
                if leaf:
                    for f in range(d):
                        var[k, f] = pooled[k, f, f]
                    full[k] = pooled[k]
                continue
            for f in range(d):
                shift = 0.0 if k == 0 else o1[f] / cnt
                bm[t, k, f] = node_mean[f] + shift
            if not leaf:
                continue
            a = cnt / (cnt + kappa_d)
            for f in range(d):
                for g in range(f + 1):
                    if g < f and not own:
                        continue
                    S = t2[f, g] if k == 0 else o2[f, g]
                    S = S / cnt - (bm[t, k, f] - node_mean[f]) * (bm[t, k, g] - node_mean[g])
                    c = a * S + (1.0 - a) * pooled[k, f, g]
                    if g == f:
                        var[k, f] = max(c, 0.0)
                    if own:
                        full[k, f, g] = full[k, g, f] = c
        if not leaf:
            continue
        j = leaf_index[o]
        leaf_mean[j] = bm[t, 0]
        if own:
            leaf_cov[j] = full[0]
            for f in range(d):
                leaf_cov[j, f, f] += ridge
        else:  # its own variances, the pooled correlations
            for f in range(d):
                sd[f] = np.sqrt(var[0, f] + ridge)
            for f in range(d):
                leaf_cov[j, f, f] = var[0, f] + ridge
                for g in range(f):
                    leaf_cov[j, f, g] = leaf_cov[j, g, f] = sd[f] * corr[f, g] * sd[g]
        m0 = m
        for q in entries:  # the pairs of positive weight, in firing order
            w = phi0[q] * sw[rows[q]]
            if w > 0.0:
                pairs[m - m0] = q
                weights[m] = w
                m += 1
        for k in range(n_folds):  # out-of-fold NLLs of the fold's rows, a block of rows at a time
            n_k = in_fold(fold, rows, pairs, m - m0, k, members)
            if n_k == 0:
                continue
            if own:
                A[:] = full[1 + k]
                for f in range(d):
                    A[f, f] += ridge
                L = cholesky(A, ridge)
                acc = 0.0
                for f in range(d):
                    acc += np.log(L[f, f])
                half = acc - log_ridge
            else:  # the row scaled to unit variances: the same divisions and logs for every row
                L = shared[k]
                half = shared_half[k] - log_ridge
                for f in range(d):
                    sd[f] = np.sqrt(var[1 + k, f] + ridge)
                    half += np.log(sd[f])
            for b0 in range(0, n_k, SOLVE_BLOCK):
                nb = min(SOLVE_BLOCK, n_k - b0)
                for j in range(nb):
                    r = rows[pairs[members[b0 + j]]]
                    for f in range(d):
                        x = U[r, f] - bm[t, 1 + k, f]
                        Z[f, j] = x if own else x / sd[f]
                _forward_sums(L, Z, V, norm, nb)
                for j in range(nb):
                    values[m0 + members[b0 + j]] = 0.5 * norm[j] + max(half, 0.0)  # log-det clipped as read
        for i in range(m - m0):
            q = pairs[i]
            term[rows[q]] += phi0[q] * values[m0 + i]
    return leaf_mean, leaf_cov, values[:m], weights[:m], term


def diagonal_leaves(sample_weight: np.ndarray, n_features: int) -> bool:
    """Whether the leaf Gaussians are diagonal: fewer training rows of positive weight than features."""
    return int(np.count_nonzero(np.asarray(sample_weight) > 0)) < n_features


@njit(cache=True)
def _moments(s0, s1, s2, total, k, o1, o2):
    """Slot ``k`` of the moments: 0 all rows, ``1 + j`` without fold ``j``. Into ``o1`` the sum of the
    centred rows less the node's mean (0 for all rows), into ``o2`` the sums of squares; returns the
    weight. Where fold ``j`` holds more than half the weight the other folds are added up instead of
    subtracted from the totals, whose difference would cancel to rounding noise (as
    `ferl.novelty.cross_fit.fold_out`)."""
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
