"""ZCA-cor whitening of the leaf covariances and their per-feature log-det shares (`ferl.novelty.typicality`).

A leaf below ``SUPPORT d`` (`ferl.novelty.typicality`) keeps its own variances and takes the pooled
within-leaf correlations (`ferl.novelty.leaf_fit`), so a tree has far fewer distinct correlation matrices
than leaves (one for all the small leaves, one per supported leaf). ``R^{-1/2}`` is computed once
per distinct correlation matrix (matrices equal to 1e-9, i.e. the same up to rounding, are one) and
each leaf scales it by its own ``V^{-1/2}``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["whitening"]

#: Correlations are grouped on their values rounded to this many decimals (the small leaves'
#: differ by rounding only, some 1e-16; a group split at a rounding boundary only costs one more
#: decomposition).
DECIMALS = 9


def whitening(cov: np.ndarray, ridge: float) -> tuple[np.ndarray, np.ndarray]:
    """ZCA-cor whitening ``R^{-1/2} V^{-1/2}``, transposed, and per-feature log-det shares of each covariance.

    Parameters
    ----------
    cov : ndarray of shape (L, d, d) or (L, d), float64
        Symmetric positive definite covariances (``V`` their variances, ``R`` their correlations), or
        the variances of diagonal ones (`ferl.novelty.leaf_fit_diag`: ``R = I``).
    ridge : float > 0
        The unit of the log-det: ``logdet(cov / ridge) / 2`` is shared out.

    Returns
    -------
    whiten_t : ndarray of shape (L, d, d), or (L, 1, d) for diagonal covariances, float64
        ``(R^{-1/2} V^{-1/2})^T``, C-contiguous; of a diagonal covariance its diagonal ``V^{-1/2}``,
        which the read-out kernels multiply element-wise (a (L, 1, d) array is diagonal when d > 1).
    half_share : ndarray of shape (L, d), float64 >= 0
        Feature ``f``'s share of ``logdet(cov / ridge) / 2`` (``ferl.novelty.typicality``'s module docstring:
        in proportion to ``max(log(V_f / ridge), 0)``, the total clipped to ``[0, sum_f t_f]``; all of
        ``max(log(V_f / ridge), 0) / 2`` for a diagonal covariance, whose ``logdet R`` is 0).
    """
    if cov.ndim == 2:
        return (1.0 / np.sqrt(cov))[:, None, :].copy(), 0.5 * np.maximum(np.log(cov / ridge), 0.0)
    v = np.diagonal(cov, axis1=1, axis2=2)
    inv_sd = 1.0 / np.sqrt(v)
    first: dict[bytes, int] = {}
    corr = []
    which = np.empty(len(cov), dtype=np.int64)
    for j in range(len(cov)):
        r = cov[j] * inv_sd[j][:, None] * inv_sd[j][None, :]
        which[j] = first.setdefault(np.round(r, DECIMALS).tobytes(), len(first))
        if which[j] == len(corr):
            corr.append(r)
    lam, vec = np.linalg.eigh(np.array(corr).reshape(-1, *cov.shape[1:]))
    # eigenvalues floored at the rounding level of a correlation matrix: a covariance of 1e170 (weights
    # spanning 1e580) hides the ridge below its rounding and can come out indefinite in float64
    lam = np.maximum(lam, lam.shape[-1] * np.finfo(np.float64).eps * lam.max(axis=-1, keepdims=True))
    # (R^{-1/2} V^{-1/2})^T = V^{-1/2} R^{-1/2}: R^{-1/2} with its rows scaled
    root = (vec / np.sqrt(lam)[:, None, :]) @ np.swapaxes(vec, 1, 2)
    whiten_t = root[which] * inv_sd[:, :, None]
    t = np.maximum(np.log(v / ridge), 0.0)
    total = t.sum(axis=1)
    logdet = np.clip(total + np.log(lam).sum(axis=1)[which], 0.0, total)
    share = np.divide(logdet, total, out=np.zeros_like(total), where=total > 0)
    return whiten_t, 0.5 * t * share[:, None]
