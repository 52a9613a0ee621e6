"""Random SIGKILLs during saves: every folder must load as the old or the new version afterwards.

Each round forks a process that saves two versions alternately into one folder, as fast as it can,
and kills it with SIGKILL after a random delay (uniform in [0, --max-delay]); then the folder is
loaded and must equal one of the two versions. Three kinds of folder:

* ``model``: a FERL model (``FERLClassifier.save``);
* ``head``: a concept head (``ConceptHead.save``: ``head.json``, the model's files, ``rules.md``);
* ``step``: a fit-head-like job step (``ferl.io.persist.StepWriter``): ``calibration.json``, two head
  folders and ``metrics.json`` replaced together; after a kill the next writer finishes or drops
  the step, and every part must then come from the same version.

Usage::

    python scripts/kill_saves.py [--rounds 25] [--kinds model head step] [--max-delay 0.3]

Prints, per kind, how many rounds ended on the old and on the new version and how many left a
folder that does not load (must be 0); exits 1 if any did. The test suite runs the ``model`` kind
with forked children (``tests/ferl/test_persist.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

X = np.random.default_rng(0).random((150, 4))
#: The two versions differ in their training labels, so they differ in every prediction file.
LABELS = [(X[:, 0] > 0.5).astype(int), (X[:, 1] + X[:, 2] > 1).astype(int)]


def _versions(kind: str, folder: Path):
    """The two fitted versions and a ``save(v)`` that writes version ``v`` into ``folder``."""
    if kind == "model":
        from ferl import FERLClassifier

        models = [FERLClassifier(random_state=0).fit(X, y) for y in LABELS]
        return models, lambda v: models[v].save(folder)
    from cbm.heads import make_head

    heads = [make_head("lr", seed=v).fit(X, y, ["a", "b", "c", "d"]) for v, y in enumerate(LABELS)]
    if kind == "head":
        return heads, lambda v: heads[v].save(folder)
    from ferl.io.persist import StepWriter

    def step(v: int) -> None:
        with StepWriter(folder) as writer:
            writer.write_text(folder / "calibration.json", json.dumps({"version": v}))
            for part in ("raw", "calibrated"):
                writer.folder(folder / "head" / part, heads[v].save)
            writer.write_text(folder / "metrics.json", json.dumps({"version": v}))

    return heads, step


def _which(loaded, versions) -> int:
    """The version whose predictions the loaded object gives; raises when none does."""
    proba = loaded.predict_proba(X)
    found = [v for v, obj in enumerate(versions) if np.array_equal(proba, obj.predict_proba(X))]
    if len(found) != 1:
        raise AssertionError("the saved object equals neither version")
    return found[0]


def _version(kind: str, folder: Path, versions) -> int:
    """Which version the folder holds (0 or 1); raises when it does not load or mixes versions."""
    if kind == "model":
        from ferl import FERLClassifier

        return _which(FERLClassifier.load(folder), versions)
    from cbm.heads import load_head

    if kind == "head":
        head = load_head(folder)
        if head.seed != _which(head, versions):
            raise AssertionError("head.json and the model files come from different versions")
        return head.seed
    from ferl.io.persist import folder_lock

    with folder_lock(folder):  # the next writer: finishes a committed step, drops an unfinished one
        pass
    found = {json.loads((folder / f).read_text())["version"] for f in ("calibration.json", "metrics.json")}
    found |= {_which(load_head(folder / "head" / part), versions) for part in ("raw", "calibrated")}
    if len(found) != 1:
        raise AssertionError(f"the step mixes versions {sorted(found)}")
    return found.pop()


def run_kind(kind: str, rounds: int, max_delay: float, seed: int) -> dict[str, int]:
    """``rounds`` forked savers of ``kind``, each SIGKILLed after a random delay; the tally."""
    rng = random.Random(seed)
    counts = {"old or new": 0, "unloadable": 0, "version 0": 0, "version 1": 0}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / kind
        versions, save = _versions(kind, folder)
        save(0)
        for r in range(rounds):
            ready_r, ready_w = os.pipe()
            pid = os.fork()
            if pid == 0:  # the saver: 1, 0, 1, 0... until killed
                os.close(ready_r)
                os.write(ready_w, b"1")
                i = 1
                while True:
                    save(i % 2)
                    i += 1
            os.close(ready_w)
            os.read(ready_r, 1)
            os.close(ready_r)
            time.sleep(rng.uniform(0, max_delay))
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            try:
                counts[f"version {_version(kind, folder, versions)}"] += 1
                counts["old or new"] += 1
            except Exception as err:  # the failure this script looks for
                counts["unloadable"] += 1
                print(f"  {kind} round {r}: {type(err).__name__}: {err}")
    return counts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=25)
    p.add_argument("--kinds", nargs="+", default=["model", "head", "step"], choices=["model", "head", "step"])
    p.add_argument("--max-delay", type=float, default=1.0, help="longest wait before the SIGKILL, seconds")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    failed = 0
    for kind in args.kinds:
        start = time.perf_counter()
        out = run_kind(kind, args.rounds, args.max_delay, args.seed)
        failed += out["unloadable"]
        print(f"{kind:>5}: {args.rounds} SIGKILLs, loadable as one version {out['old or new']}, "
              f"unloadable or mixed {out['unloadable']} (ended on version 0: {out['version 0']}, "
              f"1: {out['version 1']}) in {time.perf_counter() - start:.0f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
