"""Compiled fit of the leaf Gaussians (`ferl.typicality`): node moments with their fold-out
versions, shrinkage along the tree, and the cross-fitted leaf NLLs, in one pass (numba).

One pass replaced a per-node loop of numpy calls whose Python overhead dominated small trees
(``scripts/bench_scale.py --sections keel``: the leaf Gaussians of wine's FERL-deep went from 25 ms to
4 ms CPU, identical to 1e-15); memory beyond the outputs is one set of moments per tree level.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["depth_first", "fit_kernel"]


@njit(cache=True)
def depth_first(feature, left, right):
    """The nodes in depth-first order, left child first (pre-order: a parent before its subtree),
    int64 array of shape (n_nodes,); ``feature < 0`` marks a leaf. The order of the cross-fitted
    values of `fit_kernel` and of ``ferl._leaf_paths.cross_fitted_path_residual``."""
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
def _moments(U, sw, entries, rows, phi0, fold, n_folds, count_out, mean_out, s1, s2):
    """Weighted count and mean of a node's rows (all of them) and, on rows centred at that mean, the
    sums ``s0, s1, s2`` of each fold (row ``r`` in fold ``fold[r]``); ``s2``'s
    lower triangle only. Returns ``s0`` of shape (n_folds,)."""
    d = U.shape[1]
    s0 = np.zeros(n_folds)
    s1[:] = 0.0
    s2[:] = 0.0
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
        for f in range(d):
            wz = w * z[f]
            for g in range(f + 1):
                s2[k, f, g] += wz * z[g]
    count_out[0] = count
    return s0


@njit(cache=True)
def _shrunk(count, mean, S, prior_mean, prior_cov, kappa, out_mean, out_cov):
    """``a S + (1 - a) prior_cov`` with ``a = count / (count + kappa)`` into ``out_cov`` (``S``'s lower
    triangle read, both written), ``mean`` into ``out_mean``; no weight gives the prior."""
    d = S.shape[0]
    if count <= 0.0:
        out_mean[:] = prior_mean
        out_cov[:] = prior_cov
        return
    a = count / (count + kappa)
    out_mean[:] = mean
    for f in range(d):
        for g in range(f + 1):
            v = a * S[f, g] + (1.0 - a) * prior_cov[f, g]
            out_cov[f, g] = v
            out_cov[g, f] = v


@njit(cache=True)
def _cholesky(A, floor):
    """Lower Cholesky factor of ``A = S + floor I`` (LAPACK). Where rounding left ``S`` indefinite
    (fold-out moments cancel when the sample weights span some 1e150), the factor with every pivot
    floored at ``floor``, which leaves a positive semi-definite ``S``'s factor as it is: the pivots
    of ``S + floor I`` are never below ``floor``."""
    try:
        return np.linalg.cholesky(A)
    except Exception:  # numba cannot name LinAlgError
        pass
    d = A.shape[0]
    L = np.zeros_like(A)
    for f in range(d):
        for g in range(f + 1):
            acc = A[f, g]
            for h in range(g):
                acc -= L[f, h] * L[g, h]
            L[f, g] = np.sqrt(max(acc, floor)) if g == f else acc / L[g, g]
    return L


@njit(cache=True)
def fit_kernel(U, sw, start, count, rows, phi0, feature, left, right, parent, leaf_index, kappa_d,
                ridge, fold, n_folds):
    """Leaf means and covariances (ridge excluded) and the cross-fitted leaf NLLs of the training rows,
    in one compiled depth-first pass over the nodes (`ferl.typicality._fit_nodes` documents the model).

    Parameters
    ----------
    U : ndarray of shape (n, d), float64
        Standardised training inputs.
    sw : ndarray of shape (n,), float64 >= 0
        Sample weights.
    start, count, rows, phi0 : ndarray
        The ungated sparse firing (`ferl._firing.Firing`) of every node.
    feature, left, right, parent : ndarray of shape (n_nodes,), int64
        The tree (a parent precedes its children; ``feature < 0`` marks a leaf).
    leaf_index : ndarray of shape (n_nodes,), int64
        Position of each leaf among the leaves, -1 elsewhere.
    kappa_d : float
        Pseudo-count of the shrinkage of a non-root node to its parent.
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
    # per depth, the node on the current path: mean and covariance on all rows (index 0) and
    # without each fold (1 + k); a node's prior is its parent's, one level up
    K1 = n_folds + 1
    bm = np.zeros((depth.max() + 2, K1, d))
    bc = np.zeros((depth.max() + 2, K1, d, d))
    for k in range(K1):
        for f in range(d):
            bc[0, k, f, f] = 1.0  # the root's prior: the standard normal
    leaf_mean = np.empty((n_leaves, d))
    leaf_cov = np.empty((n_leaves, d, d))
    values = np.empty(n_values)
    weights = np.empty(n_values)
    m = 0
    node_count = np.empty(1)
    node_mean = np.empty(d)
    s1 = np.empty((n_folds, d))
    s2 = np.empty((n_folds, d, d))
    S = np.empty((d, d))
    t1 = np.empty(d)
    t2 = np.empty((d, d))
    shift = np.empty(d)
    chol = np.empty((n_folds, d, d))
    half_logdet = np.empty(n_folds)
    v = np.empty(d)
    for o in depth_first(feature, left, right):
        t = depth[o] + 1  # this node's slot; its parent's is t - 1
        kappa = kappa_d if o else 0.0
        entries = np.arange(start[o], start[o] + count[o])
        s0 = _moments(U, sw, entries, rows, phi0, fold, n_folds, node_count, node_mean, s1, s2)
        total = node_count[0]
        for f in range(d):
            acc = 0.0
            for k in range(n_folds):
                acc += s1[k, f]
            t1[f] = acc
            for g in range(f + 1):
                acc = 0.0
                for k in range(n_folds):
                    acc += s2[k, f, g]
                t2[f, g] = acc
                S[f, g] = acc / total if total > 0.0 else 0.0
        _shrunk(total, node_mean, S, bm[t - 1, 0], bc[t - 1, 0], kappa, bm[t, 0], bc[t, 0])
        for k in range(n_folds):  # without fold k: the totals minus its sums
            out0 = total - s0[k]
            safe = out0 if out0 > 0.0 else 1.0
            for f in range(d):
                shift[f] = (t1[f] - s1[k, f]) / safe
            for f in range(d):
                for g in range(f + 1):
                    S[f, g] = (t2[f, g] - s2[k, f, g]) / safe - shift[f] * shift[g]
            for f in range(d):
                v[f] = node_mean[f] + shift[f]
            _shrunk(out0, v, S, bm[t - 1, 1 + k], bc[t - 1, 1 + k], kappa, bm[t, 1 + k], bc[t, 1 + k])
        if feature[o] >= 0:
            continue
        j = leaf_index[o]
        leaf_mean[j] = bm[t, 0]
        leaf_cov[j] = bc[t, 0]
        for k in range(n_folds):
            A = bc[t, 1 + k].copy()
            for f in range(d):
                A[f, f] += ridge
            chol[k] = _cholesky(A, ridge)
            acc = 0.0
            for f in range(d):
                acc += np.log(chol[k, f, f])
            half_logdet[k] = acc - 0.5 * d * np.log(ridge)
        for q in entries:  # out-of-fold NLL of every row of positive weight
            r = rows[q]
            w = phi0[q] * sw[r]
            if w <= 0.0:
                continue
            k = fold[r]
            acc = 0.0
            for f in range(d):  # forward substitution: chol v = u - mean
                x = U[r, f] - bm[t, 1 + k, f]
                for g in range(f):
                    x -= chol[k, f, g] * v[g]
                v[f] = x / chol[k, f, f]
                acc += v[f] * v[f]
            values[m] = 0.5 * acc + half_logdet[k]
            weights[m] = w
            m += 1
    return leaf_mean, leaf_cov, values[:m], weights[:m]
