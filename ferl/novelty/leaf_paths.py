"""The paper's residual along each leaf's path, the second term of the leaf typicality that drives
the evidence discount (`ferl.novelty.typicality`): at inference and cross-fitted on the training rows (numba).

For leaf ``l`` and input ``x``, ``R_l(x)`` is the mean over the nodes ``o`` of ``l``'s root-to-leaf
path that have a free feature of ``r_o(x) = mean_{f free at o} z_of(x)^2``, ``z_of`` the standardised
distance to the node's free-feature Gaussian of paper eq. 3 (`ferl.novelty.free_gaussians`, variance floor
``VAR_FLOOR`` times the root's). It is the residual ``R`` of `ferl.novelty.scores` restricted to one
rule: for an input that reaches one leaf crisply, ``R_l(x) = R(x)``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ferl.novelty.fold_moments import diagonal_fold_moments
from ferl.novelty.leaf_fit import depth_first

__all__ = ["path_residual", "cross_fitted_path_residual"]


@njit(cache=True)
def _walk(x, o, parent, mean, inv_sd, free, n_free, z_max):
    """``R_l(x)`` of the leaf ``o`` (mean over its path of ``r_o``), ``|z|`` clipped to ``z_max``."""
    d = x.shape[0]
    total = 0.0
    m = 0
    while True:
        if n_free[o] > 0:
            acc = 0.0
            for f in range(d):
                if free[o, f]:
                    z = min(abs((x[f] - mean[o, f]) * inv_sd[o, f]), z_max)
                    acc += z * z
            total += acc / n_free[o]
            m += 1
        if o == 0:
            break
        o = parent[o]
    return total / m if m > 0 else 0.0


@njit(cache=True)
def path_residual(X, start, count, rows, phi0, leaves, parent, mean, inv_sd, free, n_free, z_max):
    """``R_l(x_i)`` of every leaf ``l`` (column ``j`` for node ``leaves[j]``) that row ``i`` reaches
    with a positive ungated firing ``phi0`` (sparse firings, `ferl.tree.firing.Firing`); 0 elsewhere.

    ``mean``, ``inv_sd`` (n_nodes, d): the free-feature Gaussians with their floored inverse
    standard deviations, ``free`` (n_nodes, d) bool, ``n_free`` (n_nodes,) (`ferl.novelty.scores`).
    Returns an ndarray of shape (n, L), float64 >= 0, finite for finite ``X``.
    """
    out = np.zeros((X.shape[0], leaves.shape[0]))
    for j in range(leaves.shape[0]):
        o = leaves[j]
        for e in range(start[o], start[o] + count[o]):
            if phi0[e] > 0.0:
                i = rows[e]
                out[i, j] = _walk(X[i], o, parent, mean, inv_sd, free, n_free, z_max)
    return out


@njit(cache=True)
def _fold_out_gaussians(U, sw, start, count, rows, phi0, fold, n_folds, var_floor):
    """Free-feature means and floored inverse standard deviations of every node without each fold.

    Returns ``mean`` and ``inv_sd`` of shape (n_folds, n_nodes, d): the weighted mean and population
    variance of the rows outside fold ``k`` (row ``r`` in fold ``fold[r]``), on sums centred at
    the node's mean over all rows; the variance floored at ``var_floor`` times the fold-out root
    variance (1 for a feature constant there), as `ferl.novelty.scores` floors the full fit's. A node with
    no weight outside the fold keeps its overall mean and the floor.
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
    n_nodes = feature.shape[0]
    n_values = 0
    for o in range(n_nodes):
        if feature[o] < 0:
            n_values += count[o]
    values = np.empty(n_values)
    m = 0
    for o in depth_first(feature, left, right):
        if feature[o] >= 0:
            continue
        for e in range(start[o], start[o] + count[o]):
            r = rows[e]
            if phi0[e] * sw[r] <= 0.0:
                continue
            k = fold[r]
            values[m] = _walk(U[r], o, parent, mean[k], inv_sd[k], free, n_free, z_max)
            m += 1
    return values[:m]
