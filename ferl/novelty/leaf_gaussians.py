"""Leaf Gaussians: how typical an input is for the rules it reaches (beyond the paper).

Paper eq. 3 gives every node a *diagonal* Gaussian over its free features. Here every leaf ``l``
(rule) also gets a *full-covariance* Gaussian ``N(mu_l, Sigma_l)`` over **all** features, fitted on
the training inputs weighted by their ungated firing ``phi0_l(x_i)`` and sample weights, in
standardised units ``u = (x - center) / scale`` (the training mean and standard deviation), so that
no statistic underflows or overflows whatever the feature scales. A leaf sees few
inputs, so its covariance is shrunk to the *pooled within-leaf covariance* ``S_w`` (the leaves'
weighted covariances about their own means, averaged with their soft counts; regularised
discriminant analysis, Friedman 1989): leaf ``l`` with soft count ``n_l`` and weighted covariance
``S_l`` gets ``Sigma_l = a_l S_l + (1 - a_l) S_w``, ``a_l = n_l / (n_l + KAPPA d)``, plus a ridge
``RIDGE`` (in standardised units, i.e. a fraction of each feature's training variance) on its
variances. Correlations need more data than variances: a leaf whose soft count is below
``SUPPORT d`` keeps its own shrunk *variances* ``D_l`` and the *pooled correlations* ``R_w`` (those of
``S_w + RIDGE I``): ``Sigma_l = (D_l + RIDGE)^{1/2} R_w (D_l + RIDGE)^{1/2}``. So the decompositions (the
whitening's ``R^{-1/2}``, the cross-fit's Choleskys) run once for all small leaves (`ferl.novelty.leaf_fit`,
`ferl.novelty.linalg`); why the pooled covariance rather than the parent's: `ferl.novelty.leaf_fit`.

Per leaf and input the negative log-likelihood, up to a constant shared by all leaves and inputs,
is ``nll_l(x) = d2_l(x) / 2 + logdet(Sigma_l / RIDGE) / 2 >= 0`` with ``d2_l`` the squared
Mahalanobis distance. Both halves split exactly over features:

* ``d2_l = sum_f w_lf^2`` with ``w_l = Sigma_l^{-1/2}``-whitened ``u - mu_l`` by ZCA-cor whitening
  (``w = R^{-1/2} V^{-1/2} (u - mu)``, ``V`` the variances and ``R`` the correlations of
  ``Sigma_l``; Kessy, Lewin & Strimmer 2018: the whitening whose components stay most correlated
  with the standardised features, so ``w_lf`` is "feature ``f``'s deviation, decorrelated");
* ``logdet(Sigma_l / RIDGE) = sum_f t_lf + logdet R_l`` with ``t_lf = log(V_lf / RIDGE) >= 0`` and
  ``logdet R_l <= 0`` (Hadamard); the total, in ``[0, sum_f t_lf]``, is shared out in proportion to
  ``t_lf`` (how loose leaf ``l`` is on feature ``f``), so each feature's share is ``>= 0``.

The input's score averages the leaves by their ungated firing (which sums to one over the leaves):
``T(x) = sum_l phi0_l(x) nll_l(x)`` (`leaf_terms`).

**Reliability** (of the per-source evidence discount, `ferl.novelty.discount`): the fit also gives
``(tau, lambda)`` (`LeafGaussians.reliability`), the firing-weighted `RELIABILITY_QUANTILES` of the
leaf typicality scores of the training inputs, *cross-fitted*: scored on leaf and free-feature
Gaussians refitted without each of `CROSS_FIT` interleaved folds (`ferl.novelty.cross_fit`). The
same cross-fit gives the held-out leaf term ``T`` of every training row, the reference of the
default ``"typical"`` discount.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numba import njit

from ferl.novelty.cross_fit import CROSS_FIT, cross_fitted_path_residual, weighted_quantile
from ferl.novelty.free_gaussians import VAR_FLOOR
from ferl.novelty.leaf_fit import diagonal_fit_kernel, diagonal_leaves, fit_kernel
from ferl.novelty.leaf_moments import MOMENT_BUDGET
from ferl.novelty.linalg import Z_MAX, one_blas_thread, whitening
from ferl.tree.firing import Firing
from ferl.tree.fuzzy_tree import FuzzyTree

__all__ = ["BLAS_ROWS", "KAPPA", "RELIABILITY_QUANTILES", "RIDGE", "SUPPORT", "LeafGaussians",
           "fit_leaf_gaussians", "leaf_terms", "leaf_totals"]

#: Shrinkage of a leaf's covariance to the pooled one: pseudo-counts per feature (``KAPPA * d``).
KAPPA = 0.5
#: Soft count per feature a leaf needs for correlations of its own (``SUPPORT * d``; below it, the
#: pooled ones): chosen against ``KAPPA``, see `ferl.novelty.leaf_fit`.
SUPPORT = 0.25
#: Ridge added to every leaf covariance, in standardised units (a fraction of the training variance).
RIDGE = 1e-3
#: Quantiles of the cross-fitted training leaf typicality scores where the reliability starts to
#: fall and where it reaches 1/2.
RELIABILITY_QUANTILES = (0.9, 0.96)
#: A leaf's rows are whitened in one BLAS product from this many on, one by one below: a BLAS
#: call's fixed cost outweighs a few rows' work (chosen by measurement: docs/results/speed.md).
BLAS_ROWS = 8
#: A cross-fitted leaf typicality score that rounding made NaN or infinite counts as this (finite,
#: so that the reliability's ``(tau, lambda)`` are).
VALUE_MAX = np.finfo(np.float64).max / 8


@dataclass
class LeafGaussians:
    """Fitted leaf Gaussians (see the module docstring); build with `fit_leaf_gaussians`.

    Attributes
    ----------
    center, scale : ndarray of shape (d,), float64
        Standardisation of the inputs (weighted training mean and standard deviation; 1 for a
        constant feature).
    leaves : ndarray of shape (L,), int64
        Node index of each leaf, in node order.
    mean : ndarray of shape (L, d), float64
        ``mu_l`` in standardised units.
    cov : ndarray of shape (L, d, d), or (L, d) when diagonal, float64
        ``Sigma_l`` in standardised units, ridge included (symmetric positive definite); its diagonal
        when the model was fitted on fewer rows than features (`ferl.novelty.leaf_fit`).
    reliability : ndarray of shape (2,), float64
        ``(tau, lambda)`` of the reliability, in the units of the leaf typicality score (nats per
        feature), ``lambda > 0``.
    whiten_t : ndarray of shape (L, d, d), or (L, 1, d) when diagonal, float64
        The ZCA-cor whitening matrices, transposed (C-contiguous: the read-out's right operand;
        derived from ``cov``, not saved; `ferl.novelty.linalg.whitening`).
    half_share : ndarray of shape (L, d), float64 >= 0
        Each feature's share of ``logdet(Sigma_l / RIDGE) / 2`` (derived, not saved).
    """

    center: np.ndarray
    scale: np.ndarray
    leaves: np.ndarray
    mean: np.ndarray
    cov: np.ndarray
    reliability: np.ndarray
    whiten_t: np.ndarray = field(init=False, repr=False)
    half_share: np.ndarray = field(init=False, repr=False)

    #: Arrays a saved model stores (the rest is derived by `__post_init__`).
    SAVED_FIELDS = ("center", "scale", "leaves", "mean", "cov", "reliability")

    def __post_init__(self) -> None:
        with one_blas_thread():
            self.whiten_t, self.half_share = whitening(self.cov, RIDGE)


def _folds(sw: np.ndarray) -> np.ndarray:
    """The cross-fit fold of each row, int64 of the shape of ``sw``: the ``j``-th row of positive weight
    in fold ``j % CROSS_FIT`` (rows of weight 0 are never scored nor fitted on)."""
    return ((np.cumsum(np.asarray(sw) > 0) - 1) % CROSS_FIT).astype(np.int64)


def _fit_nodes(tree: FuzzyTree, U: np.ndarray, W: Firing, sw: np.ndarray, fold: np.ndarray):
    """Leaf means and covariances (ridge included), and the cross-fitted leaf NLLs.

    The pooled within-leaf covariance, then each leaf's moments shrunk to it (a leaf with no weight
    takes its parent's mean and the pooled covariance; below the pseudo-count ``SUPPORT d`` the
    variances only, with the pooled correlations; supported or not is decided on all rows, the same
    in every fold), once on all rows and once without each of the `CROSS_FIT` interleaved folds
    (the pooled covariance too), so that the fold's rows are scored on Gaussians that never saw
    them. Two compiled passes (`ferl.novelty.leaf_fit.fit_kernel`): per leaf, the fold sums on rows
    centred at its mean, so a fold-out moment costs no extra pass over the rows.

    Returns
    -------
    mean : ndarray of shape (L, d)
    cov : ndarray of shape (L, d, d)
    values, weights : ndarray of shape (m,)
        Out-of-fold ``nll_l(x_i)`` of every (training row, leaf) pair of positive weight
        (ungated firing ``W`` times sample weight ``sw``), and that weight.
    term : ndarray of shape (n,)
        Out-of-fold ``T(x_i)`` of every training row (0 for rows of weight 0).
    """
    leaf_index = np.full(tree.n_nodes, -1, dtype=np.int64)
    leaf_index[tree.is_leaf] = np.arange(int(tree.is_leaf.sum()))
    nodes = (np.asarray(a, dtype=np.int64) for a in (tree.feature, tree.left, tree.right, tree.parent))
    args = (np.ascontiguousarray(U), np.ascontiguousarray(sw, dtype=np.float64), W.start, W.count, W.rows,
            W.phi0, *nodes, leaf_index, KAPPA * U.shape[1])
    if diagonal_leaves(sw, U.shape[1]):  # fewer rows than features: variances only, linear in d
        return diagonal_fit_kernel(*args, RIDGE, fold, CROSS_FIT)
    return fit_kernel(*args, SUPPORT * U.shape[1], RIDGE, fold, CROSS_FIT, MOMENT_BUDGET)


def fit_leaf_gaussians(tree: FuzzyTree, U: np.ndarray, center: np.ndarray, scale: np.ndarray,
                       sample_weight: np.ndarray, firing: Firing,
                       free: np.ndarray) -> tuple[LeafGaussians, np.ndarray]:
    """Fit the leaf Gaussians and the reliability of the module docstring.

    Parameters
    ----------
    tree : FuzzyTree
        A finalised tree with its free-feature Gaussians (`ferl.novelty.free_gaussians`).
    U : ndarray of shape (n_samples, n_features), float64
        The training inputs standardised by ``center`` and ``scale`` (`ferl.novelty.linalg.standardise`);
        passed as a temporary, it is released before the quantiles.
    center, scale : ndarray of shape (n_features,), float64
        The standardisation (`ferl.novelty.free_gaussians.standardisation`).
    sample_weight : ndarray of shape (n_samples,), float64, >= 0, some > 0
    firing : Firing
        The ungated sparse training firing (its ``phi0`` is read).
    free : ndarray of shape (n_nodes, n_features), bool
        The free features of each node (the complement of `FuzzyTree.path_mask`).

    Returns
    -------
    LeafGaussians
    ndarray of shape (n_samples,), float64
        The cross-fitted leaf term ``T(x_i) = sum_l phi0_l(x_i) nll_l(x_i)`` of every training row,
        each row scored by Gaussians fitted without its fold (0 for rows of weight 0): the honest
        reference of the evidence discount (`ferl.novelty.prototypes.fit_rule_prototypes`).
    """
    sw = np.asarray(sample_weight, dtype=np.float64)
    fold = _folds(sw)
    with one_blas_thread():
        mean, cov, values, weights, term = _fit_nodes(tree, U, firing, sw, fold)
    d = U.shape[1]
    residual = cross_fitted_path_residual(
        U, np.ascontiguousarray(sw), firing.start, firing.count, firing.rows, firing.phi0,
        np.asarray(tree.feature, dtype=np.int64), np.asarray(tree.left, dtype=np.int64),
        np.asarray(tree.right, dtype=np.int64), np.asarray(tree.parent, dtype=np.int64), free,
        free.sum(axis=1).astype(np.int64), fold, CROSS_FIT, VAR_FLOOR, Z_MAX)
    del U  # the rest needs only the per-pair values: one copy of X fewer at the quantiles
    # finite whatever rounding did to a fold-out Gaussian (an NLL overflowed to inf with weights
    # spanning 1e580), with room for the quantiles' arithmetic
    values = np.nan_to_num(values / d + residual / 2, nan=VALUE_MAX, posinf=VALUE_MAX)
    q0, q1 = RELIABILITY_QUANTILES
    tau = weighted_quantile(values, weights, q0)
    half = weighted_quantile(values, weights, q1)
    width = max(half - tau, 1e-6 * max(abs(tau), 1.0)) / np.log(2.0)
    model = LeafGaussians(center, scale, np.flatnonzero(tree.is_leaf), mean, cov, np.array([tau, width]))
    return model, term


@njit(cache=True, fastmath={"reassoc", "nsz"})
def half_norm2(w):
    """``sum_f w_f^2 / 2`` of a whitened row ``w`` (d,), float64: a leaf's Mahalanobis half of its
    NLL. Its additions may be reassociated, so the compiler runs them in SIMD lanes instead of one
    chain bound by their latency; every kernel reads the NLL from here, so all give the same floats."""
    acc = 0.0
    for f in range(w.shape[0]):
        acc += 0.5 * w[f] * w[f]
    return acc


@njit(cache=True)
def _leaf_kernel(U, phi0, mean, whiten_t, half_share, half_logdet, block):
    """Leaf by leaf: the rows the leaf reaches, whitened in one matrix product (BLAS) when they are
    at least ``block``, else row by row (a BLAS call costs more than a few small rows)."""
    n, d = U.shape
    n_leaves = mean.shape[0]
    deviation = np.zeros((n, d))
    spread = np.zeros((n, d))
    nll = np.zeros((n, n_leaves))
    ptr = np.zeros(n_leaves + 1, dtype=np.int64)  # the positive entries, leaf by leaf
    for i in range(n):
        for j in range(n_leaves):
            if phi0[i, j] > 0.0:
                ptr[j + 1] += 1
    for j in range(n_leaves):
        ptr[j + 1] += ptr[j]
    idx = np.empty(ptr[n_leaves], dtype=np.int64)
    fill = ptr[:-1].copy()
    for i in range(n):
        for j in range(n_leaves):
            if phi0[i, j] > 0.0:
                idx[fill[j]] = i
                fill[j] += 1
    for j in range(n_leaves):
        k = ptr[j + 1] - ptr[j]
        if k == 0:
            continue
        V = np.empty((k, d))
        for a in range(k):
            for f in range(d):
                V[a, f] = U[idx[ptr[j] + a], f] - mean[j, f]
        if whiten_t.shape[1] < d:  # a diagonal covariance (`ferl.novelty.leaf_fit`)
            Wm = V * whiten_t[j]
        elif k >= block:
            Wm = V @ whiten_t[j]
        else:
            Wm = np.zeros((k, d))
            for a in range(k):
                for f in range(d):
                    acc = 0.0
                    for g in range(d):
                        acc += V[a, g] * whiten_t[j, g, f]
                    Wm[a, f] = acc
        for a in range(k):
            i = idx[ptr[j] + a]
            p = phi0[i, j]
            for f in range(d):
                deviation[i, f] += p * (0.5 * Wm[a, f] * Wm[a, f])
                spread[i, f] += p * half_share[j, f]
            nll[i, j] = half_norm2(Wm[a]) + half_logdet[j]
    return deviation, spread, nll


def leaf_terms(model: LeafGaussians, U: np.ndarray, phi0: np.ndarray):
    """Per-feature halves of ``T(x)`` and the per-leaf NLLs of standardised inputs.

    Parameters
    ----------
    model : LeafGaussians
    U : ndarray of shape (n, d), float64
        Standardised inputs (`standardise`).
    phi0 : ndarray of shape (n, L), float64 >= 0
        Ungated firing of the leaves (any non-negative weights).

    Returns
    -------
    deviation : ndarray of shape (n, d), float64 >= 0
        ``sum_l phi0_l w_lf^2 / 2``.
    spread : ndarray of shape (n, d), float64 >= 0
        ``sum_l phi0_l`` (feature ``f``'s share of ``logdet(Sigma_l / RIDGE) / 2``).
    nll : ndarray of shape (n, L), float64 >= 0
        ``nll_l(x)`` where ``phi0_l(x) > 0``, else 0.
    """
    with one_blas_thread():
        return _leaf_kernel(np.ascontiguousarray(U), np.ascontiguousarray(phi0), model.mean, model.whiten_t,
                            model.half_share, model.half_share.sum(axis=1), BLAS_ROWS)


@njit(cache=True)
def _leaf_totals(U, start, count, rows, phi0, leaves, mean, whiten_t, half_logdet, block, want_nll):
    """``T`` (n,) and, when ``want_nll``, ``nll`` (n, L) (else an empty (0, L) array); see `leaf_totals`.

    Leaf by leaf, the standardised rows ``U`` that reach it minus its mean are whitened in one BLAS
    product when they are at least ``block``, else row by row (each output feature summed over the
    inputs in the same order as the product of `ferl.novelty.leaf_gaussians.leaf_terms`, so the same floats).
    """
    n, d = U.shape
    n_leaves = leaves.shape[0]
    total = np.zeros(n)
    nll = np.zeros((n if want_nll else 0, n_leaves))
    w = np.empty(d)
    most = 0
    for j in range(n_leaves):
        most = max(most, count[leaves[j]])
    idx = np.empty(most, dtype=np.int64)  # a leaf's positive entries, in row order
    V_all = np.empty((most, d))  # buffers for the largest leaf, sliced for each
    W_all = np.empty((most, d))
    for j in range(n_leaves):
        o = leaves[j]
        k = 0
        for e in range(start[o], start[o] + count[o]):
            if phi0[e] > 0.0:
                idx[k] = e
                k += 1
        if k == 0:
            continue
        V = V_all[:k]
        for a in range(k):
            i = rows[idx[a]]
            for f in range(d):
                V[a, f] = U[i, f] - mean[j, f]
        Wm = V  # below block: whitened row by row into w
        rowwise = k < block and whiten_t.shape[1] == d
        if whiten_t.shape[1] < d:  # a diagonal covariance (`ferl.novelty.leaf_fit`)
            Wm = W_all[:k]
            Wm[:] = V * whiten_t[j]
        elif k >= block:
            Wm = W_all[:k]
            np.dot(V, whiten_t[j], Wm)
        for a in range(k):
            if rowwise:
                for f in range(d):
                    w[f] = 0.0
                for g in range(d):
                    vg = V[a, g]
                    for f in range(d):
                        w[f] += vg * whiten_t[j, g, f]
                d2 = half_norm2(w)
            else:
                d2 = half_norm2(Wm[a])
            e = idx[a]
            value = d2 + half_logdet[j]
            total[rows[e]] += phi0[e] * value
            if want_nll:
                nll[rows[e], j] = value
    return total, nll


def leaf_totals(model: LeafGaussians, U: np.ndarray, fired: Firing, want_nll: bool = False):
    """``T(x) = sum_l phi0_l(x) nll_l(x)`` and, when asked, the per-leaf ``nll_l(x)`` of inputs.

    Beyond the paper (the leaf Gaussians of `ferl.novelty.leaf_gaussians`). ``T`` equals the row sums of
    ``deviation + spread`` of `ferl.novelty.leaf_gaussians.leaf_terms` (up to round-off: summed leaf by leaf
    rather than feature by feature) and ``nll`` equals its third output bit for bit.

    Parameters
    ----------
    model : LeafGaussians
        The leaf Gaussians of the tree that fired.
    U : ndarray of shape (n_samples, n_features), float64
        The inputs, standardised by the model's ``center`` and ``scale``
        (`ferl.novelty.linalg.standardise`; once per row, not once per leaf a row reaches).
    fired : Firing
        The sparse firings of the inputs (their ungated ``phi0`` is read).
    want_nll : bool, default=False
        Also return the per-leaf NLLs (the evidence discount needs them).

    Returns
    -------
    total : ndarray of shape (n_samples,), float64 >= 0
        ``T(x)``.
    nll : ndarray of shape (n_samples, L), float64 >= 0, or None
        ``nll_l(x)`` where ``phi0_l(x) > 0``, else 0; None unless ``want_nll``.
    """
    leaves = np.asarray(model.leaves, dtype=np.int64)
    args = (np.ascontiguousarray(U, dtype=np.float64), fired.start, fired.count, fired.rows, fired.phi0,
            leaves, model.mean, model.whiten_t, model.half_share.sum(axis=1), BLAS_ROWS, bool(want_nll))
    if fired.count[leaves].max() >= BLAS_ROWS:  # some leaf is whitened by BLAS
        with one_blas_thread():
            total, nll = _leaf_totals(*args)
    else:
        total, nll = _leaf_totals(*args)
    return total, (nll if want_nll else None)
