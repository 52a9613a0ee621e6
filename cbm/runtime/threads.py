"""The CPU threads of torch, numba and the BLAS / OpenMP libraries, set in one place.

Every console script takes ``--threads N`` and calls :func:`set_threads` before its work. The
default is :func:`available_cores`, the cores the process may run on (``os.sched_getaffinity``,
which honours ``taskset`` and container CPU sets; ``os.cpu_count`` counts the whole machine). On a
machine shared with other jobs, a smaller ``--threads`` avoids oversubscribing the cores.
:func:`thread_settings` reports what is in force; ``train-detector`` writes it to
``environment.json``.
"""

from __future__ import annotations

import os
from typing import Any

import numba
import torch
from jsonargparse import ArgumentParser
from jsonargparse.typing import PositiveInt
from threadpoolctl import threadpool_info, threadpool_limits

__all__ = ["add_threads_argument", "available_cores", "set_threads", "thread_settings"]

#: Environment variables read by libraries started later (subprocesses, DataLoader workers).
_ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def add_threads_argument(parser: ArgumentParser) -> None:
    """Add the ``--threads N`` option (a positive integer; default None: :func:`available_cores`)."""
    parser.add_argument("--threads", type=PositiveInt | None, default=None,
                        help="CPU threads of torch, numba and BLAS (default: the cores this process may "
                             "use, os.sched_getaffinity)")


def available_cores() -> int:
    """Number of CPU cores this process may run on (its affinity mask; ``os.cpu_count`` where the
    platform has none)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # platforms without sched_getaffinity (macOS)
        return os.cpu_count() or 1


def set_threads(n: int | None = None) -> dict[str, Any]:
    """Set the threads of torch (intra-op), numba and the BLAS / OpenMP pools to ``n``.

    Parameters
    ----------
    n : int or None
        Threads, >= 1; None means :func:`available_cores`. numba cannot exceed the pool it started
        with (``NUMBA_NUM_THREADS``, fixed at import): a larger ``n`` is capped there.

    Returns
    -------
    dict
        :func:`thread_settings` after the change, plus ``requested`` (``n``).

    Raises
    ------
    ValueError
        ``n`` is not a positive integer.
    """
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ValueError(f"threads must be a positive integer, got {n!r}")
    threads = available_cores() if n is None else n
    torch.set_num_threads(threads)
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    threadpool_limits(limits=threads)  # applies at once, process-wide
    for var in _ENV_VARS:
        os.environ[var] = str(threads)
    return {"requested": n, **thread_settings()}


def thread_settings() -> dict[str, Any]:
    """The thread counts in force (JSON-able): cores available, torch intra- and inter-op threads,
    numba's threads and each BLAS / OpenMP pool's."""
    return {
        "available_cores": available_cores(),
        "cpu_count": os.cpu_count(),
        "torch": torch.get_num_threads(),
        "torch_interop": torch.get_num_interop_threads(),
        "numba": numba.get_num_threads(),
        "blas_openmp": [{"library": p.get("internal_api"), "threads": p.get("num_threads")}
                        for p in threadpool_info()],
    }
