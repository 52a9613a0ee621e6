"""BLAS / LAPACK on one thread for the leaf Gaussians' many small dense products (threadpoolctl).

The leaf Gaussians (`ferl.typicality`) factorise and multiply hundreds of d x d matrices (d up to a
few hundred). On OpenBLAS's thread pool those calls spend about half their CPU time waiting: a
CUB-shaped FERL-deep fit (3,000 rows, d = 112, 200 classes) took 3.73 s CPU with the pool's two
threads and 1.87 s with one (``OPENBLAS_NUM_THREADS=1``), same tree and numbers. `one_blas_thread`
pins the pool to one thread for those calls only; the controller that finds the BLAS libraries is
built once (about 10 microseconds per use after that).
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
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
        Restores the previous thread counts on exit; does nothing where every BLAS library runs
        on one thread already (asking costs about 1 microsecond, limiting and restoring about 30:
        as much as a small read-out's kernels).
    """
    if all(lib.get_num_threads() == 1 for lib in _blas()):
        return nullcontext()
    return _controller().limit(limits=1, user_api="blas")
