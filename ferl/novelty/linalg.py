"""The small linear algebra shared by the novelty models (beyond the paper): BLAS on one thread,
the standardisation of the inputs, the ZCA-cor whitening of the leaf covariances and a Cholesky
factor that survives rounding.

**BLAS on one thread** (`one_blas_thread`, threadpoolctl). The leaf Gaussians
(`ferl.novelty.leaf_gaussians`) factorise and multiply hundreds of d x d matrices (d up to a few
hundred). On OpenBLAS's thread pool those calls spend about half their CPU time waiting: a
CUB-shaped FERL-deep fit took about twice the CPU time with the pool's two threads as with one
(``OPENBLAS_NUM_THREADS=1``), same tree and numbers (docs/results/speed.md). `one_blas_thread`
pins the pool to one thread for those calls only; the controller that finds the BLAS libraries is
built once (about 10 microseconds per use after that).

**Standardisation** (`standardise`): ``u = clip((x - center) / scale, -Z_MAX, Z_MAX)``, the units of
the leaf Gaussians and the rule prototypes, finite for any finite input.

**ZCA-cor whitening** (`whitening`). A leaf below ``SUPPORT d`` (`ferl.novelty.leaf_gaussians`)
keeps its own variances and takes the pooled within-leaf correlations (`ferl.novelty.leaf_fit`),
so a tree has far fewer distinct correlation matrices than leaves (one for all the small leaves,
one per supported leaf). ``R^{-1/2}`` is computed once per distinct correlation matrix (matrices
equal to 1e-9, i.e. the same up to rounding, are one) and each leaf scales it by its own
``V^{-1/2}``.
"""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager, contextmanager, nullcontext
from functools import cache

import numpy as np
from numba import njit
from threadpoolctl import ThreadpoolController

__all__ = ["DECIMALS", "Z_MAX", "cholesky", "correlation", "one_blas_thread", "standardise", "whitening"]

#: Standardised inputs are clipped to ``[-Z_MAX, Z_MAX]``: scores stay finite for any finite input.
Z_MAX = 1e100


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


@cache
def _controller() -> ThreadpoolController:
    return ThreadpoolController()


@cache
def _blas():
    return _controller().select(user_api="blas").lib_controllers


def one_blas_thread() -> AbstractContextManager:
    """Context manager: every BLAS library loaded so far runs on one thread inside it.

    Returns
    -------
    contextlib.AbstractContextManager
        Restores the previous thread counts when the last of the threads inside leaves (`_pinned`);
        does nothing where every BLAS library runs on one thread already and no thread is inside
        (asking costs about 1 microsecond, limiting and restoring about 30: as much as a small
        read-out's kernels).
    """
    if _inside == 0 and all(lib.get_num_threads() == 1 for lib in _blas()):
        return nullcontext()
    return _pinned()


_lock = threading.Lock()
_inside = 0  # threads in `_pinned`
_limiter = None  # what the first of them found, restored by the last


@contextmanager
def _pinned():
    """One thread for BLAS while any thread is inside: the first one in limits, the last one out
    restores. A limiter per thread restored what it found: one that found the pool pinned by
    another thread's read-out put one thread back, and the pool stayed there."""
    global _inside, _limiter
    with _lock:
        if _inside == 0:
            _limiter = _controller().limit(limits=1, user_api="blas")
        _inside += 1
    try:
        yield
    finally:
        with _lock:
            _inside -= 1
            if _inside == 0:
                _limiter.restore_original_limits()
                _limiter = None


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
        the variances of diagonal ones (`ferl.novelty.leaf_fit`: ``R = I``).
    ridge : float > 0
        The unit of the log-det: ``logdet(cov / ridge) / 2`` is shared out.

    Returns
    -------
    whiten_t : ndarray of shape (L, d, d), or (L, 1, d) for diagonal covariances, float64
        ``(R^{-1/2} V^{-1/2})^T``, C-contiguous; of a diagonal covariance its diagonal ``V^{-1/2}``,
        which the read-out kernels multiply element-wise (a (L, 1, d) array is diagonal when d > 1).
    half_share : ndarray of shape (L, d), float64 >= 0
        Feature ``f``'s share of ``logdet(cov / ridge) / 2`` (`ferl.novelty.leaf_gaussians`'
        module docstring: in proportion to ``max(log(V_f / ridge), 0)``, the total clipped to
        ``[0, sum_f t_f]``; all of ``max(log(V_f / ridge), 0) / 2`` for a diagonal covariance, whose
        ``logdet R`` is 0).
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


@njit(cache=True)
def cholesky(A, floor):
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
def correlation(C, ridge, out):
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
