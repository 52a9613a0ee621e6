"""Compiled fit of the leaf Gaussians (`ferl.novelty.typicality`): the pooled within-leaf covariance, each
leaf's moments with their fold-out versions shrunk to it, and the cross-fitted leaf NLLs (numba).

Compiled passes replaced a per-node loop of numpy calls whose Python overhead dominated small trees
(the same values up to round-off; timings in docs/results/speed.md). Per leaf and fold the sums are taken
on rows centred at the leaf's mean, so a fold-out moment costs no pass over the rows
(`ferl.novelty.fold_moments`); memory beyond the outputs is one set of moments and the pooled
covariances.

A leaf below ``SUPPORT d`` (`ferl.novelty.typicality`) gets its mean and variances only (the diagonal of
its second moments) and the pooled correlations; its fold-out NLLs scale the row by the leaf's own
standard deviations and solve with the Cholesky factor of the pooled correlations, factorised once
per fold for all such leaves; that keeps the fit on a CUB-shaped set (``python scripts/bench_scale.py
--sections cub``: 6,000 rows, 112 concepts, 200 classes) within its fit-time target
(docs/results/speed.md).

A leaf's rows of one fold are solved `SOLVE_BLOCK` at a time (`_forward_sums`), each with the
operations of a solve of its own, so the NLLs are the same floats as row by row, in a fraction of
the time: a single row's substitution waits on its chain of subtractions, a block's runs in SIMD
lanes across its rows (docs/results/speed.md).

``SUPPORT = KAPPA / 2`` was chosen when the shrinkage target was the parent's covariance, against
``KAPPA`` and no ``SUPPORT``, with a refit on another bootstrap seed as the noise: the ``nll``
AUROCs on CUB-50, the synthetic open world and 10 KEEL sets stayed within a refit's noise, at a
fraction of the factorisations (figures in docs/results/novelty.md, "The leaf Gaussians").
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ferl.novelty.fold_moments import fold_moments, fold_out, fold_totals, leaf_weight, moment_buffers

__all__ = ["SOLVE_BLOCK", "depth_first", "fit_kernel"]

#: Rows of a leaf and fold whose cross-fitted NLLs are solved together (`_forward_sums`).
SOLVE_BLOCK = 32


@njit(cache=True)
def depth_first(feature, left, right):
    """The nodes in depth-first order, left child first (pre-order: a parent before its subtree),
    int64 array of shape (n_nodes,); ``feature < 0`` marks a leaf. The order of the cross-fitted
    values of `fit_kernel` and of ``ferl.novelty.leaf_paths.cross_fitted_path_residual``."""
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
def _cholesky(A, floor):
    """Lower Cholesky factor of ``A = S + floor I`` (LAPACK). Where rounding left ``A`` indefinite
    (fold-out moments cancel when the sample weights span some 1e150; a fold-out covariance near
    1e80 hides the ridge below its rounding), the factor of ``A + s I`` with the smallest shift
    ``s = 4 d eps max_f A_ff 10^j`` that LAPACK accepts: ``s`` is at the rounding level of ``A``,
    and the factor's pivots stay above ``sqrt(s)``. (Flooring each pivot at ``floor`` instead grew
    the factor without bound: 1e267 from entries of 1e79, and the NLLs overflowed.) Where no shift
    up to ``1e40 s`` does, i.e. ``A`` is not finite, the factor with every pivot floored at ``floor``."""
    try:
        return np.linalg.cholesky(A)
    except Exception:  # numba cannot name LinAlgError
        pass
    d = A.shape[0]
    top = floor
    for f in range(d):
        top = max(top, A[f, f])
    shift = 4.0 * d * np.finfo(np.float64).eps * top
    B = A.copy()
    for _ in range(40):
        for f in range(d):
            B[f, f] = A[f, f] + shift
        try:
            return np.linalg.cholesky(B)
        except Exception:
            shift *= 10.0
    L = np.zeros_like(A)
    for f in range(d):
        for g in range(f + 1):
            acc = A[f, g]
            for h in range(g):
                acc -= L[f, h] * L[g, h]
            L[f, g] = np.sqrt(max(acc, floor)) if g == f else acc / L[g, g]
    return L


@njit(cache=True)
def _correlation(C, ridge, out):
    """The correlations of ``C + ridge I`` into ``out``; returns the smallest pivot its Cholesky
    factor can have (``ridge / max_f (C_ff + ridge)``, its smallest eigenvalue's lower bound)."""
    d = C.shape[0]
    inv = np.empty(d)
    top = 0.0
    for f in range(d):
        top = max(top, C[f, f] + ridge)
        inv[f] = 1.0 / np.sqrt(C[f, f] + ridge)
    for f in range(d):
        out[f, f] = 1.0
        for g in range(f):
            out[f, g] = out[g, f] = C[f, g] * inv[f] * inv[g]
    return ridge / top


@njit(cache=True)
def _pooled(U, sw, start, count, rows, phi0, feature, fold, n_folds):
    """The pooled within-leaf covariance on all rows (index 0) and without each fold (``1 + k``),
    shape (n_folds + 1, d, d), symmetric: every leaf's weighted scatter about its own mean, summed,
    over the summed soft counts; the identity where no leaf has weight."""
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
        for g in range(f):
            lfg = L[f, g]
            for j in range(nb):
                V[f, j] -= lfg * V[g, j]
        for j in range(nb):
            V[f, j] = V[f, j] / L[f, f]
            norm[j] += V[f, j] * V[f, j]


@njit(cache=True)
def fit_kernel(U, sw, start, count, rows, phi0, feature, left, right, parent, leaf_index, kappa_d,
               support_d, ridge, fold, n_folds):
    """Leaf means and covariances (ridge included) and the cross-fitted leaf NLLs of the training rows,
    in one compiled depth-first pass over the nodes (`ferl.novelty.typicality._fit_nodes` documents the
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
    pooled = _pooled(U, sw, start, count, rows, phi0, feature, fold, n_folds)
    # the small leaves' correlations: the pooled ones (ridge added); per fold, their Cholesky factor
    A = np.empty((d, d))
    corr = np.empty((d, d))
    _correlation(pooled[0], ridge, corr)
    shared = np.empty((n_folds, d, d))
    shared_half = np.zeros(n_folds)
    for k in range(n_folds):
        shared[k] = _cholesky(A, _correlation(pooled[1 + k], ridge, A))
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
    in_fold = np.empty_like(pairs)
    Z = np.empty((d, SOLVE_BLOCK))  # a block of centred rows, feature-major
    V = np.empty((d, SOLVE_BLOCK))
    norm = np.empty(SOLVE_BLOCK)
    log_ridge = 0.5 * d * np.log(ridge)
    for o in depth_first(feature, left, right):
        t = depth[o] + 1  # this node's slot; its parent's is t - 1
        leaf = feature[o] < 0
        entries = np.arange(start[o], start[o] + count[o])
        own = leaf and leaf_weight(sw, entries, rows, phi0) >= support_d  # decided on all rows
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
            n_k = 0
            for i in range(m - m0):
                if fold[rows[pairs[i]]] == k:
                    in_fold[n_k] = i
                    n_k += 1
            if n_k == 0:
                continue
            if own:
                A[:] = full[1 + k]
                for f in range(d):
                    A[f, f] += ridge
                L = _cholesky(A, ridge)
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
                    r = rows[pairs[in_fold[b0 + j]]]
                    for f in range(d):
                        x = U[r, f] - bm[t, 1 + k, f]
                        Z[f, j] = x if own else x / sd[f]
                _forward_sums(L, Z, V, norm, nb)
                for j in range(nb):
                    values[m0 + in_fold[b0 + j]] = 0.5 * norm[j] + max(half, 0.0)  # log-det clipped as read
        for i in range(m - m0):
            q = pairs[i]
            term[rows[q]] += phi0[q] * values[m0 + i]
    return leaf_mean, leaf_cov, values[:m], weights[:m], term
