"""The leaf Gaussians' term of the OOD score from sparse firings, without its per-feature split (numba).

`ferl.novelty.typicality.leaf_terms` splits ``T(x) = sum_l phi0_l(x) nll_l(x)`` over the features (the
deviation and spread halves that `ferl.novelty.scores.Novelty.feature_scores` shares out), reading a dense
samples x leaves firing matrix. An OOD score alone needs only the total, and the evidence discount
the per-leaf ``nll_l``: `leaf_totals` gives both straight from the sparse firings
(`ferl.tree.firing.Firing`), whose entries already list, leaf by leaf, the rows that reach it. A leaf's
rows are whitened exactly as `leaf_terms` whitens them (same rows in the same order, one BLAS
product from ``block`` rows on, row by row below), so ``nll_l`` is the same float.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ferl.novelty.blas import one_blas_thread
from ferl.novelty.typicality import BLAS_ROWS, LeafGaussians, half_norm2, standardise
from ferl.tree.firing import Firing

__all__ = ["leaf_totals"]


@njit(cache=True)
def _leaf_totals(U, start, count, rows, phi0, leaves, mean, whiten_t, half_logdet, block, want_nll):
    """``T`` (n,) and, when ``want_nll``, ``nll`` (n, L) (else an empty (0, L) array); see `leaf_totals`.

    Leaf by leaf, the standardised rows ``U`` that reach it minus its mean are whitened in one BLAS
    product when they are at least ``block``, else row by row (each output feature summed over the
    inputs in the same order as the product of `ferl.novelty.typicality.leaf_terms`, so the same floats).
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
        if whiten_t.shape[1] < d:  # a diagonal covariance (`ferl.novelty.leaf_fit_diag`)
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


def leaf_totals(model: LeafGaussians, X: np.ndarray, fired: Firing, want_nll: bool = False):
    """``T(x) = sum_l phi0_l(x) nll_l(x)`` and, when asked, the per-leaf ``nll_l(x)`` of inputs.

    Beyond the paper (the leaf Gaussians of `ferl.novelty.typicality`). ``T`` equals the row sums of
    ``deviation + spread`` of `ferl.novelty.typicality.leaf_terms` (up to round-off: summed leaf by leaf
    rather than feature by feature) and ``nll`` equals its third output bit for bit.

    Parameters
    ----------
    model : LeafGaussians
        The leaf Gaussians of the tree that fired.
    X : ndarray of shape (n_samples, n_features), float64, finite
        The inputs (standardised here as `ferl.novelty.typicality.standardise` does).
    fired : Firing
        The sparse firings of ``X`` (their ungated ``phi0`` is read).
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
    # standardised once per row here, not once per leaf a row reaches (the same floats)
    args = (standardise(np.asarray(X, dtype=np.float64), model.center, model.scale), fired.start, fired.count,
            fired.rows, fired.phi0, leaves, model.mean, model.whiten_t, model.half_share.sum(axis=1),
            BLAS_ROWS, bool(want_nll))
    if fired.count[leaves].max() >= BLAS_ROWS:  # some leaf is whitened by BLAS
        with one_blas_thread():
            total, nll = _leaf_totals(*args)
    else:
        total, nll = _leaf_totals(*args)
    return total, (nll if want_nll else None)
