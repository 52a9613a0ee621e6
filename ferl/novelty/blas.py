"""BLAS / LAPACK on one thread for the leaf Gaussians' many small dense products (threadpoolctl).

The leaf Gaussians (`ferl.novelty.typicality`) factorise and multiply hundreds of d x d matrices (d up to a
few hundred). On OpenBLAS's thread pool those calls spend about half their CPU time waiting: a
CUB-shaped FERL-deep fit took about twice the CPU time with the pool's two threads as with one
(``OPENBLAS_NUM_THREADS=1``), same tree and numbers (docs/results/speed.md). `one_blas_thread`
pins the pool to one thread for those calls only; the controller that finds the BLAS libraries is
built once (about 10 microseconds per use after that).
"""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager, contextmanager, nullcontext
from functools import cache

from threadpoolctl import ThreadpoolController

__all__ = ["one_blas_thread"]


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
