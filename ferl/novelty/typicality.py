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
`ferl.novelty.zca`).

Why the pooled covariance rather than the parent's (each node shrunk to its parent along the
tree, small leaves borrowing their nearest supported ancestor's correlations): along the tree's
chain a small leaf is fitted to the mixture of classes above it, while the pooled covariance is the
within-class spread every leaf shares; it ranked held-out classes better on the synthetic open
world and CUB-50 and slightly worse on KEEL. ``SUPPORT`` keeps the fit within its fit-time target
on many classes (docs/results/speed.md), at a small cost in ranking on KEEL. Chosen by measurement
(``scripts/bench_openworld_novelty.py``, ``scripts/bench_novelty_tabular.py``):
docs/results/novelty.md, "The leaf Gaussians".

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

**Reliability** (for the per-source evidence discount, ``novelty_discount="rules"``,
`ferl.evidence.discount`): leaf ``l`` is a reliable source for ``x`` when its *typicality score*
``s_l(x) = nll_l(x) / d + R_l(x) / 2`` (the leaf's part of the ``nll`` OOD score of `ferl.novelty.scores`,
with half the paper's free-feature residual along its path, `ferl.novelty.leaf_paths`) is no larger than
for typical training inputs: ``r_l(x) = exp(-delta min(s_l, tau) / tau - max(0, s_l - tau) /
lambda)`` (``delta`` = `ferl.novelty.reliability.TYPICAL_DISCOUNT`). ``tau`` and ``lambda`` come from the
*cross-fitted* scores of the training inputs (the leaf Gaussians and the free-feature Gaussians
refitted without each of `CROSS_FIT` interleaved folds, on the same tree, and evaluated on that
fold): ``tau`` is their firing-weighted `RELIABILITY_QUANTILES` [0] quantile and ``r = 1/2`` at
the [1] quantile. The same cross-fit gives the held-out leaf term ``T`` of every training row,
the reference of the default ``"typical"`` discount (`ferl.novelty.discount`).

``RELIABILITY_QUANTILES`` = (0.9, 0.96) was chosen on the synthetic open world
(``scripts/bench_openworld_novelty.py``, FERL-deep) as the only setting tried that meets both
abstention targets (at least 40 % of held-out images, at most 5 % of retained test images) while
keeping ``r`` near 1 for 90 % of typical inputs; the grid is in docs/results/novelty.md ("The
per-source discount").

`ferl.novelty.reliability` says how ``delta`` was chosen.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numba import njit

from ferl.novelty.blas import one_blas_thread
from ferl.novelty.free_gaussians import VAR_FLOOR, weighted_moments
from ferl.novelty.leaf_fit import fit_kernel
from ferl.novelty.leaf_fit_diag import diagonal_fit_kernel, diagonal_leaves
from ferl.novelty.leaf_paths import cross_fitted_path_residual
from ferl.novelty.zca import whitening
from ferl.tree.firing import Firing
from ferl.tree.fuzzy_tree import FuzzyTree

__all__ = ["CROSS_FIT", "KAPPA", "RELIABILITY_QUANTILES", "RIDGE", "SUPPORT", "Z_MAX", "LeafGaussians",
           "fit_leaf_gaussians", "leaf_terms", "standardise"]

#: Shrinkage of a leaf's covariance to the pooled one: pseudo-counts per feature (``KAPPA * d``).
KAPPA = 0.5
#: Soft count per feature a leaf needs for correlations of its own (``SUPPORT * d``; below it, the
#: pooled ones): chosen against ``KAPPA``, see `ferl.novelty.leaf_fit`.
SUPPORT = 0.25
#: Ridge added to every leaf covariance, in standardised units (a fraction of the training variance).
RIDGE = 1e-3
#: Interleaved folds of the reliability's cross-fitted reference: the ``j``-th row of positive weight
#: is in fold ``j % CROSS_FIT`` (`_folds`), so that rows of weight 0 change nothing.
CROSS_FIT = 5
#: Quantiles of the cross-fitted training leaf typicality scores where the reliability starts to
#: fall and where it reaches 1/2.
RELIABILITY_QUANTILES = (0.9, 0.96)
#: A leaf's rows are whitened in one BLAS product from this many on, one by one below: a BLAS
#: call's fixed cost outweighs a few rows' work (chosen by measurement: docs/results/speed.md).
BLAS_ROWS = 8
#: Standardised inputs are clipped to ``[-Z_MAX, Z_MAX]``: scores stay finite for any finite input.
Z_MAX = 1e100
#: A cross-fitted leaf typicality score that rounding made NaN or infinite counts as this (finite,
#: so that the reliability's ``(tau, lambda)`` are).
VALUE_MAX = np.finfo(np.float64).max / 8


def standardise(X: np.ndarray, center: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``clip((X - center) / scale, -Z_MAX, Z_MAX)``, finite for finite ``X`` (no overflow warning).

    One compiled pass (the floats of numpy's subtract, divide and clip, which took three passes).

    Parameters
    ----------
    X : ndarray of shape (n, d), float64, finite
    center, scale : ndarray of shape (d,), float64, finite, ``scale > 0``

    Returns
    -------
    ndarray of shape (n, d), float64, C-contiguous

    Raises
    ------
    ValueError
        ``X`` not 2-D, or ``center`` / ``scale`` not finite of shape (d,) (``scale`` also > 0).
    """
    X, center, scale = (np.asarray(a, dtype=np.float64) for a in (X, center, scale))
    if X.ndim != 2 or center.shape != X.shape[1:] or scale.shape != X.shape[1:]:
        raise ValueError(f"standardise needs X (n, d) with center and scale (d,); got {X.shape}, "
                         f"{center.shape} and {scale.shape}")
    if not (np.isfinite(center).all() and (np.isfinite(scale) & (scale > 0)).all()):
        raise ValueError(f"standardise needs a finite center and a finite, positive scale; got {center} "
                         f"and {scale}")
    return _standardise(*(np.ascontiguousarray(a) for a in (X, center, scale)))


@njit(cache=True)
def _standardise(X, center, scale):
    n, d = X.shape
    U = np.empty((n, d))
    for i in range(n):
        for f in range(d):
            U[i, f] = min(max((X[i, f] - center[f]) / scale[f], -Z_MAX), Z_MAX)
    return U


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
        when the model was fitted on fewer rows than features (`ferl.novelty.leaf_fit_diag`).
    reliability : ndarray of shape (2,), float64
        ``(tau, lambda)`` of the reliability, in the units of the leaf typicality score (nats per
        feature), ``lambda > 0``.
    whiten_t : ndarray of shape (L, d, d), or (L, 1, d) when diagonal, float64
        The ZCA-cor whitening matrices, transposed (C-contiguous: the read-out's right operand;
        derived from ``cov``, not saved; `ferl.novelty.zca.whitening`).
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


def _fit_nodes(tree: FuzzyTree, U: np.ndarray, W: Firing, sw: np.ndarray):
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
        return diagonal_fit_kernel(*args, RIDGE, _folds(sw), CROSS_FIT)
    return fit_kernel(*args, SUPPORT * U.shape[1], RIDGE, _folds(sw), CROSS_FIT)


def _weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order])
    return float(values[order][min(np.searchsorted(cum, q * cum[-1]), values.size - 1)])


def fit_leaf_gaussians(tree: FuzzyTree, X: np.ndarray, sample_weight: np.ndarray,
                       firing: Firing | None = None) -> tuple[LeafGaussians, np.ndarray]:
    """Fit the leaf Gaussians and the reliability of the module docstring.

    Parameters
    ----------
    tree : FuzzyTree
        A finalised tree.
    X : ndarray of shape (n_samples, n_features), float64, finite
        The training inputs.
    sample_weight : ndarray of shape (n_samples,), float64, >= 0, some > 0
    firing : Firing, optional
        The sparse firing of ``X`` (its ungated ``phi0`` is read), when the caller has it already;
        computed otherwise.

    Returns
    -------
    LeafGaussians
    ndarray of shape (n_samples,), float64
        The cross-fitted leaf term ``T(x_i) = sum_l phi0_l(x_i) nll_l(x_i)`` of every training row,
        each row scored by Gaussians fitted without its fold (0 for rows of weight 0): the honest
        reference of the evidence discount (`ferl.novelty.prototypes.fit_rule_prototypes`).

    Raises
    ------
    ValueError
        A feature whose spread is too small to standardise (positive but below
        ``float64``'s smallest normal number): the message names it.
    """
    sw = np.asarray(sample_weight, dtype=np.float64)
    center, scale = _standardisation(X, sw)
    U = standardise(X, center, scale)
    W = tree.sparse_firing(X, False, np.ones(tree.n_nodes)) if firing is None else firing
    with one_blas_thread():
        mean, cov, values, weights, term = _fit_nodes(tree, U, W, sw)
    d = X.shape[1]
    free = ~tree.path_mask(d)
    residual = cross_fitted_path_residual(
        U, np.ascontiguousarray(sw, dtype=np.float64), W.start, W.count, W.rows, W.phi0,
        np.asarray(tree.feature, dtype=np.int64), np.asarray(tree.left, dtype=np.int64),
        np.asarray(tree.right, dtype=np.int64), np.asarray(tree.parent, dtype=np.int64), free,
        free.sum(axis=1).astype(np.int64), _folds(sw), CROSS_FIT, VAR_FLOOR, Z_MAX)
    del U  # the rest needs only the per-pair values: one copy of X fewer at the quantiles
    # finite whatever rounding did to a fold-out Gaussian (an NLL overflowed to inf with weights
    # spanning 1e580), with room for the quantiles' arithmetic
    values = np.nan_to_num(values / d + residual / 2, nan=VALUE_MAX, posinf=VALUE_MAX)
    q0, q1 = RELIABILITY_QUANTILES
    tau = _weighted_quantile(values, weights, q0)
    half = _weighted_quantile(values, weights, q1)
    width = max(half - tau, 1e-6 * max(abs(tau), 1.0)) / np.log(2.0)
    model = LeafGaussians(center, scale, np.flatnonzero(tree.is_leaf), mean, cov, np.array([tau, width]))
    return model, term


def _standardisation(X: np.ndarray, sw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Weighted mean and standard deviation per feature, computed without overflow or underflow."""
    rows = (sw > 0)[:, None]  # the range of the positive-weight rows, without copying them
    lo = X.min(axis=0, where=rows, initial=np.inf)
    hi = X.max(axis=0, where=rows, initial=-np.inf)
    mid = lo / 2 + hi / 2
    half = hi / 2 - lo / 2
    unit = np.where(half > 0, half, 1.0)
    # moments of V = (X - mid) / unit, in [-1, 1] on the rows of positive weight, without a copy
    m, sd = weighted_moments(np.ascontiguousarray(X, dtype=np.float64), sw, mid, unit, sw.sum())
    tiny = np.finfo(np.float64).tiny
    bad = (half > 0) & ((half < tiny) | (sd * unit < tiny) | (sd == 0))
    if bad.any():
        raise ValueError(
            f"feature(s) {np.flatnonzero(bad).tolist()[:10]} vary by less than float64 can standardise "
            f"(spread below {tiny:.3g}); rescale X (e.g. standardise it) before fitting")
    return mid + unit * m, np.where(half > 0, sd * unit, 1.0)


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
        if whiten_t.shape[1] < d:  # a diagonal covariance (`ferl.novelty.leaf_fit_diag`)
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
