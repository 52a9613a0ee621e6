"""Process settings shared by every console script: how many CPU threads torch, numba and BLAS use.

Owns `set_threads` (the one place that sets them, from each script's ``--threads`` option added by
`add_threads_argument`), `available_cores` (the default: the cores this process may run on) and
`thread_settings` (what is in force, recorded in ``environment.json``).
"""

from cbm.runtime.threads import add_threads_argument, available_cores, set_threads, thread_settings

__all__ = ["add_threads_argument", "available_cores", "set_threads", "thread_settings"]
