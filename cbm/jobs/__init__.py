"""What every console script shares (plumbing, not a stage of the data flow): one-line errors,
signals that stop a job at any point, and the message saying what a stopped job kept.

``console_main(prog, job)`` runs ``job()`` and turns

* bad input and file-system errors (``ValueError``, ``OSError`` -- a missing or unreadable file,
  a read-only or full disk, a run folder another process is writing --, ``FloatingPointError``,
  invalid YAML) into one line ``<prog>: error: <message>`` and exit status 1;
* SIGTERM and SIGINT, at any point of the job, into `Interrupted` raised in the main thread
  (Lightning composes its own SIGTERM handler with ours, so this holds inside its loops too), and
  then one line ``<prog>: error: interrupted by SIGTERM while <phase>; <what was kept>`` and exit
  status 128 + the signal number (143 for SIGTERM, 130 for SIGINT).

Jobs name what they are doing, and what an interruption at that point leaves on disk, with
`phase`; the innermost phase is reported. Files are written with :mod:`ferl.io.persist`, so an
interruption never leaves a half-written model, head or job step::

    def main(argv=None):
        cfg = parser().parse_args(argv)
        console_main("my-job", lambda: run(cfg))

    def run(cfg):
        with phase("fitting", kept=f"{cfg.out} unchanged: nothing is written before the end"):
            ...
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import yaml

__all__ = ["ERRORS", "Interrupted", "console_main", "one_line", "phase", "signals_interrupt"]

#: Exceptions a console script reports as one ``error:`` line (exit status 1).
ERRORS = (ValueError, OSError, FloatingPointError, yaml.YAMLError)
#: (what the job is doing, what an interruption now keeps), innermost last.
_PHASES: list[tuple[str, str]] = []
_T = TypeVar("_T")


class Interrupted(BaseException):
    """SIGTERM or SIGINT arrived; raised where the main thread was (not an ``Exception``, so a job's
    ``except Exception`` does not swallow it).

    Attributes
    ----------
    signum : int
    doing, kept : str
        The innermost `phase` when the signal arrived.
    """

    def __init__(self, signum: int, doing: str, kept: str) -> None:
        self.signum, self.doing, self.kept = signum, doing, kept
        super().__init__(f"interrupted by {signal.Signals(signum).name} while {doing}; {kept}")


@contextmanager
def phase(doing: str, kept: str) -> Iterator[None]:
    """Name what the job does inside the block and what an interruption there leaves on disk."""
    _PHASES.append((doing, kept))
    try:
        yield
    finally:
        _PHASES.pop()


_OWNER: list[int] = []  # pid of the process whose main thread installed the handlers


def _raise_interrupted(signum: int, frame: Any) -> None:
    if _OWNER and os.getpid() != _OWNER[-1]:  # a forked worker (a DataLoader's): the default behaviour
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    doing, kept = _PHASES[-1] if _PHASES else ("starting", "nothing was written")
    raise Interrupted(signum, doing, kept)


@contextmanager
def signals_interrupt() -> Iterator[None]:
    """Inside the block, SIGTERM and SIGINT raise `Interrupted` (main thread only; else a no-op).

    Processes forked inside the block (DataLoader workers) keep the default behaviour: SIGINT raises
    ``KeyboardInterrupt`` there (which the workers expect) and SIGTERM ends them.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _OWNER.append(os.getpid())
    previous = {s: signal.signal(s, _raise_interrupted) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
        _OWNER.pop()


def one_line(err: BaseException) -> str:
    """The message of ``err`` on one line (an error re-raised from a DataLoader worker, whose message
    holds the worker's traceback, is reduced to its last line, the original error)."""
    text = str(err) or type(err).__name__
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if "Original Traceback (most recent call last):" in lines:
        lines = lines[-1:]
    return " ".join(lines)


def console_main(prog: str, job: Callable[[], _T]) -> _T:
    """Run ``job()`` as the body of console script ``prog``; see the module docstring.

    Returns
    -------
    The job's return value.

    Raises
    ------
    SystemExit
        Exit status 1 with ``<prog>: error: ...`` for `ERRORS`; 128 + the signal number after
        printing ``<prog>: error: interrupted by ...`` for SIGTERM / SIGINT.
    """
    try:
        with signals_interrupt():
            return job()
    except Interrupted as err:
        print(f"{prog}: error: {err}", file=sys.stderr, flush=True)
        raise SystemExit(128 + err.signum) from None
    except ERRORS as err:
        raise SystemExit(f"{prog}: error: {one_line(err)}") from err
