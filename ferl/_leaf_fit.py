"""Compiled fit of the leaf Gaussians (`ferl.typicality`): node moments with their fold-out
versions, shrinkage along the tree, and the cross-fitted leaf NLLs, in one pass (numba).

One pass replaced a per-node loop of numpy calls whose Python overhead dominated small trees
(``scripts/bench_scale.py --sections keel``: the leaf Gaussians of wine's FERL-deep went from 25 ms to
4 ms CPU, identical to 1e-15); memory beyond the outputs is one set of moments and of fold-out
Cholesky factors per tree level.

A node below ``SUPPORT d`` (`ferl.typicality`) gets its mean and variances only (the
diagonal of the second moments) and borrows the correlations of its nearest supported ancestor's
slot; its fold-out NLLs scale the row by the leaf's own standard deviations and solve with the
Cholesky factor of those correlations, computed when a leaf first needs it (for the folds its rows
fall in): the factorisations run once per distinct covariance or correlation matrix. On the
CUB-shaped set (``scripts/bench_scale.py --sections cub --rule-budgets 400``: N = 6,000, d = 112,
200 classes, 717 leaves, 200 distinct correlation matrices) the pass went from 0.82 s to 0.31 s
CPU and the whole FERL-deep fit from 3.08 s to 1.66 s (one run each; CART 0.87 / 0.83 s);
decomposing each leaf's own matrix cannot get there (its batched ``eigh`` alone took 0.85 s of a
3.5 s fit).

``SUPPORT`` chosen by measurement, before -> ``SUPPORT = KAPPA / 2`` (kept) | ``SUPPORT = KAPPA``
(FERL-deep; "refit": the old model with another bootstrap seed, ``random_state`` + 100, the noise):

* CUB-50 open world, real concepts (``scripts/bench_openworld_novelty.py`` on the 5 folds of seed 0
  of ``configs/openworld/cub50_lite0.yaml``'s run): ``nll`` AUROC 66.3 -> 65.9 | 65.6 (per fold
  -0.4, -0.2, -0.5, -0.9, +0.1 | -0.7, 0.0, -2.0, -0.8, +0.3; refit 65.8); discounted ignorance
  58.0 -> 57.7 | 57.8 (refit 60.3); abstention with the discount, held-out / retained test 22.2 /
  9.7 -> 21.4 / 9.6 | 21.6 / 9.7. Borrowing the whole covariance at ``KAPPA d`` (variances too)
  did worse: 65.4 (lower on every fold), 57.6, 20.6 / 9.0.
* Synthetic open world (seed 0 folds 0-1; ``synthetic_more`` seed 1 fold 2): ``nll`` AUROC 92.0 ->
  91.9 | 91.6 (refit 92.7), 87.2 -> 87.2 | 87.3 (88.3); discounted ignorance 74.3 -> 74.6 | 74.1
  (79.0), 66.8 -> 67.3 | 67.9 (77.4); abstention held-out / retained 41.1 / 4.9 -> 41.7 / 5.1 |
  40.6 / 5.2, and 30.2 / 3.6 unchanged; attribute naming p@3 66.3 -> 66.5 | 66.1.
* KEEL, 10 sets x 5 folds (``scripts/bench_novelty_tabular.py --datasets wine glass ecoli vehicle
  yeast cleveland newthyroid segment sonar ionosphere``; OOD on the 8 multiclass ones): ``nll``
  AUROC 78.52 -> 78.43 | 78.27 (worst set cleveland -0.5 | -1.5); discounted ignorance 68.25 ->
  68.18 | 68.11; with the discount, accuracy / coverage / set size 77.85 / 88.57 / 1.937 -> 77.91 /
  88.60 / 1.935 | 77.88 / 88.51 / 1.933.

``KAPPA / 2`` moves the novelty numbers less than a refit does, at about 0.2 s more leaf fit than
``KAPPA`` on the CUB-shaped set (92 distinct matrices there).
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
def _weight(sw, entries, rows, phi0):
    """Soft count of a node: the sum of ``phi0 * sw`` over its positive entries (as `_moments` sums it)."""
    count = 0.0
    for q in entries:
        w = phi0[q] * sw[rows[q]]
        if w > 0.0:
            count += w
    return count


@njit(cache=True)
def _moments(U, sw, entries, rows, phi0, fold, n_folds, count_out, mean_out, s1, s2, full):
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
def _shrunk_diag(count, mean, S, prior_mean, prior_var, kappa, out_mean, out_var):
    """The diagonal of `_shrunk`: ``a S_ff + (1 - a) prior_var_f`` into ``out_var`` (``S``'s diagonal
    read), ``mean`` into ``out_mean``; no weight gives the prior."""
    if count <= 0.0:
        out_mean[:] = prior_mean
        out_var[:] = prior_var
        return
    a = count / (count + kappa)
    out_mean[:] = mean
    for f in range(S.shape[0]):
        out_var[f] = a * S[f, f] + (1.0 - a) * prior_var[f]


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
def fit_kernel(U, sw, start, count, rows, phi0, feature, left, right, parent, leaf_index, kappa_d,
                support_d, ridge, fold, n_folds):
    """Leaf means and covariances (ridge included) and the cross-fitted leaf NLLs of the training rows,
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
    support_d : float
        Soft count a node (of a supported parent) needs for correlations of its own; below it, it
        borrows its parent's.
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
    # per depth, the node on the current path: mean, variances and (supported nodes only)
    # covariance on all rows (index 0) and without each fold (1 + k); a node's prior is its
    # parent's, one level up; an unsupported node's correlations are those of slot src[t]
    K1 = n_folds + 1
    n_slots = depth.max() + 2
    bm = np.zeros((n_slots, K1, d))
    bv = np.ones((n_slots, K1, d))  # the root's prior: the standard normal
    bc = np.zeros((n_slots, K1, d, d))
    for k in range(K1):
        for f in range(d):
            bc[0, k, f, f] = 1.0
    src = np.zeros(n_slots, dtype=np.int64)
    supported = np.zeros(n_slots, dtype=np.bool_)
    supported[0] = True
    # per slot and fold, computed when a leaf first needs it: the Cholesky factor of the fold-out
    # covariance (ridge added) for the slot's own leaf, of its correlations for the leaves that
    # borrow them; a supported node that takes the slot invalidates them
    chol = np.empty((n_slots, n_folds, d, d))
    half_logdet = np.empty((n_slots, n_folds))
    valid = np.zeros((n_slots, n_folds), dtype=np.bool_)
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
    v = np.empty(d)
    sd = np.empty(d)
    A = np.empty((d, d))
    log_ridge = 0.5 * d * np.log(ridge)
    for o in depth_first(feature, left, right):
        t = depth[o] + 1  # this node's slot; its parent's is t - 1
        kappa = kappa_d if o else 0.0
        entries = np.arange(start[o], start[o] + count[o])
        # supported: the root, or a node of a supported parent whose soft count reaches support_d
        own = o == 0 or (supported[t - 1] and _weight(sw, entries, rows, phi0) >= support_d)
        s0 = _moments(U, sw, entries, rows, phi0, fold, n_folds, node_count, node_mean, s1, s2, own)
        total = node_count[0]
        supported[t] = own
        src[t] = t if own else src[t - 1]
        if own:
            valid[t] = False
        for f in range(d):
            acc = 0.0
            for k in range(n_folds):
                acc += s1[k, f]
            t1[f] = acc
            for g in range(f + 1):
                if g < f and not own:
                    continue
                acc = 0.0
                for k in range(n_folds):
                    acc += s2[k, f, g]
                t2[f, g] = acc
                S[f, g] = acc / total if total > 0.0 else 0.0
        if own:
            _shrunk(total, node_mean, S, bm[t - 1, 0], bc[t - 1, 0], kappa, bm[t, 0], bc[t, 0])
        else:
            _shrunk_diag(total, node_mean, S, bm[t - 1, 0], bv[t - 1, 0], kappa, bm[t, 0], bv[t, 0])
        for k in range(n_folds):  # without fold k: the totals minus its sums
            out0 = total - s0[k]
            safe = out0 if out0 > 0.0 else 1.0
            for f in range(d):
                shift[f] = (t1[f] - s1[k, f]) / safe
            for f in range(d):
                for g in range(f + 1):
                    if g < f and not own:
                        continue
                    S[f, g] = (t2[f, g] - s2[k, f, g]) / safe - shift[f] * shift[g]
            for f in range(d):
                v[f] = node_mean[f] + shift[f]
            if own:
                _shrunk(out0, v, S, bm[t - 1, 1 + k], bc[t - 1, 1 + k], kappa, bm[t, 1 + k], bc[t, 1 + k])
            else:
                _shrunk_diag(out0, v, S, bm[t - 1, 1 + k], bv[t - 1, 1 + k], kappa, bm[t, 1 + k],
                             bv[t, 1 + k])
        if own:
            for k in range(K1):
                for f in range(d):
                    bv[t, k, f] = bc[t, k, f, f]
        if feature[o] >= 0:
            continue
        j = leaf_index[o]
        c = src[t]
        leaf_mean[j] = bm[t, 0]
        if c == t:
            leaf_cov[j] = bc[t, 0]
            for f in range(d):
                leaf_cov[j, f, f] += ridge
        else:  # its own variances, its ancestor's correlations
            _correlation(bc[c, 0], ridge, A)
            for f in range(d):
                sd[f] = np.sqrt(bv[t, 0, f] + ridge)
            for f in range(d):
                leaf_cov[j, f, f] = bv[t, 0, f] + ridge
                for g in range(f):
                    leaf_cov[j, f, g] = leaf_cov[j, g, f] = sd[f] * A[f, g] * sd[g]
        for q in entries:  # out-of-fold NLL of every row of positive weight
            r = rows[q]
            w = phi0[q] * sw[r]
            if w <= 0.0:
                continue
            k = fold[r]
            if not valid[c, k]:
                if c == t:
                    A[:] = bc[c, 1 + k]
                    for f in range(d):
                        A[f, f] += ridge
                    floor = ridge
                else:
                    floor = _correlation(bc[c, 1 + k], ridge, A)
                chol[c, k] = _cholesky(A, floor)
                acc = 0.0
                for f in range(d):
                    acc += np.log(chol[c, k, f, f])
                half_logdet[c, k] = acc
                valid[c, k] = True
            acc = 0.0
            half = half_logdet[c, k] - log_ridge
            for f in range(d):  # forward substitution: chol v = u - mean (scaled to unit variances)
                x = U[r, f] - bm[t, 1 + k, f]
                if c != t:
                    s = np.sqrt(bv[t, 1 + k, f] + ridge)
                    x /= s
                    half += np.log(s)
                for g in range(f):
                    x -= chol[c, k, f, g] * v[g]
                v[f] = x / chol[c, k, f, f]
                acc += v[f] * v[f]
            values[m] = 0.5 * acc + max(half, 0.0)  # the read-out's log-det is clipped at 0 too
            weights[m] = w
            m += 1
    return leaf_mean, leaf_cov, values[:m], weights[:m]
