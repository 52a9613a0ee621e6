"""Fixtures shared by the ferl and cbm tests: running code in a child process, killed at an exact
file-system step (the crash tests of ferl.io.persist and the jobs that use it) or signalled."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from threadpoolctl import threadpool_limits


def _share_the_cores_between_workers() -> None:
    """Under pytest-xdist, give each worker its own share of the cores (its affinity mask, which the
    jobs' ``--threads`` default, the BLAS / OpenMP pools and child processes follow): two workers
    that each ran two threads on two cores would thrash. Without xdist nothing changes."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
    if not worker.startswith("gw") or count < 2 or not hasattr(os, "sched_setaffinity"):
        return
    cores = sorted(os.sched_getaffinity(0))
    share = len(cores) // count
    if share < 1:
        return
    index = int(worker[2:]) % count
    os.sched_setaffinity(0, cores[index * share:(index + 1) * share])
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):  # pools started later
        os.environ[var] = str(share)
    threadpool_limits(limits=share)  # pools started already


_share_the_cores_between_workers()

REPO = Path(__file__).resolve().parents[1]
#: A child that has not ended by then is killed and the test fails (a hung child must not hang CI).
CHILD_TIMEOUT_S = 600

#: The file-system calls counted as steps: every write, rename and delete of a save goes through them.
FS_STEPS = ("fsync", "replace", "unlink", "rmdir", "mkdir")


class Child:
    """Run a function in a forked process, optionally SIGKILLed at its k-th file-system step, or
    Python code in a fresh interpreter (`python`: for code that runs torch, whose thread pools do
    not survive a fork)."""

    @staticmethod
    def python(code: str, stderr: Path) -> int:
        """Run ``code`` with ``python -c`` (this checkout first on the path); return its exit status."""
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        with open(stderr, "w") as err:
            return subprocess.run([sys.executable, "-c", code], stderr=err, stdout=subprocess.DEVNULL,
                                  env=env, timeout=CHILD_TIMEOUT_S, check=False).returncode

    @staticmethod
    def count_steps(monkeypatch: pytest.MonkeyPatch, fn: Callable[[], object]) -> int:
        """The file-system steps ``fn()`` takes, run in this process."""
        count = [0]
        for name in FS_STEPS:
            real = getattr(os, name)

            def step(*args, _real=real, **kwargs):
                count[0] += 1
                return _real(*args, **kwargs)

            monkeypatch.setattr(os, name, step)
        fn()
        monkeypatch.undo()
        return count[0]

    @staticmethod
    def run(fn: Callable[[], object], kill_at: int | None = None, stderr: Path | None = None) -> int:
        """Run ``fn()`` in a fork; SIGKILL it just after its ``kill_at``-th file-system step. Returns
        the wait status (``os.WIFSIGNALED`` / ``os.WEXITSTATUS`` read it); ``stderr`` collects its
        standard error."""
        pid = os.fork()
        if pid:
            deadline = time.monotonic() + CHILD_TIMEOUT_S
            while time.monotonic() < deadline:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    return status
                time.sleep(0.05)
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"the child process did not end within {CHILD_TIMEOUT_S} s")
        code = 0  # pragma: no cover - the child from here on
        try:
            if stderr is not None:
                fd = os.open(stderr, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                os.dup2(fd, 2)
                sys.stderr = os.fdopen(2, "w", buffering=1)
            if kill_at is not None:
                count = [0]
                for name in FS_STEPS:
                    real = getattr(os, name)

                    def step(*args, _real=real, **kwargs):
                        out = _real(*args, **kwargs)
                        count[0] += 1
                        if count[0] == kill_at:
                            os.kill(os.getpid(), signal.SIGKILL)
                        return out

                    setattr(os, name, step)
            fn()
        except SystemExit as err:
            code = err.code if isinstance(err.code, int) else 1
            if not isinstance(err.code, int | None):
                print(err.code, file=sys.stderr)
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 99
        finally:
            sys.stderr.flush()
            os._exit(code)


    @staticmethod
    @contextlib.contextmanager
    def holding_lock(folder: Path):
        """Inside the block another process holds ``ferl.io.persist.folder_lock(folder)`` (taken before
        the block starts, released when it ends)."""
        from ferl.io.persist import folder_lock

        ready, stop = os.pipe(), os.pipe()

        def hold():
            with folder_lock(folder):
                os.write(ready[1], b"1")
                os.read(stop[0], 1)

        pid = os.fork()
        if pid == 0:  # pragma: no cover - the other writer
            Child.run(hold)
            os._exit(0)
        os.read(ready[0], 1)
        try:
            yield
        finally:
            os.write(stop[1], b"1")
            os.waitpid(pid, 0)


@pytest.fixture
def child() -> Child:
    """See `Child`: ``child.run(fn, kill_at=k)``, ``child.count_steps(monkeypatch, fn)``,
    ``with child.holding_lock(folder): ...``."""
    return Child()


@pytest.fixture(scope="session", autouse=True)
def ferl_kernels_compiled() -> None:
    """Fit and read out a small FERL model of each preset, and one with learned weights of evidence
    (fit-head's FERL-deep), once before the first test.

    On a fresh clone numba compiles FERL's kernels here (about 25 s on 2 cores) instead of inside
    whichever test first fits a model; ``cache=True`` keeps them in ``ferl/**/__pycache__``, so later
    runs load them (about a second). Tests with other input types still compile their own
    specialisations (a second or two each, once)."""
    from ferl import PRESETS, FERLClassifier
    from ferl.benchmarks.ood_kinds import ABLATION_KINDS, ablation_score
    from ferl.novelty import OOD_KINDS

    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(3), 40)
    X = np.clip(0.5 + 0.2 * rng.normal(size=(120, 5)) + 0.15 * y[:, None], 0, 1)
    models = [FERLClassifier(p, random_state=0) for p in PRESETS]
    models.append(FERLClassifier("deep", evidence_weights="learned", random_state=0))
    for model in models:
        model.fit(X, y)
        model.predict_set(X)
        if model.evidence_weights_ is not None:  # energy and joint need learned weights, joint a reference
            model.calibrate_novelty(X)
        for kind in OOD_KINDS:
            if kind == "typical" or model.evidence_weights_ is not None:
                model.ood_score(X, kind=kind)
        for kind in ABLATION_KINDS:
            ablation_score(model, X, kind)
        model.anomalous_features(X[:3])
        model.robustness_radius(X[:3])
        model.explain(X[0])
