"""The demo job behind ``make demo``: the whole pipeline on the embedded synthetic concept world.

:func:`run_demo` drives the project's console scripts (loaded from their installed entry points
and called in this process, exactly as the shell would run them)::

    train-detector --config configs/detector/synthetic.yaml --run-dir runs/demo
    fit-head --config configs/head/default.yaml --run runs/demo
    evaluate-openworld --config configs/demo/openworld.yaml --out runs/demo/openworld
    evaluate-interventions --config configs/interventions/default.yaml --run runs/demo
    evaluate-shift --config configs/shift/synthetic.yaml --run runs/demo --out runs/demo/shift
    python -m cbm.report runs/demo --openworld runs/demo/openworld --shift runs/demo/shift

Safe re-runs. ``runs/demo/demo_state.json`` records a fingerprint of the configuration (profile
arguments and config files) and the steps finished. On start:

* no folder: a fresh run;
* a finished run: moved to ``runs/demo.previous`` (readable until the new run finishes, then
  removed), and a fresh run starts;
* an unfinished run with the same fingerprint (an interrupted demo): resumed; finished steps are
  skipped, the detector resumes from ``detector/checkpoints/last.ckpt`` (``--ckpt-path last``),
  an unfinished open-world fold is retrained from scratch;
* an unfinished run with another fingerprint, or ``fresh=True``: removed and started afresh, so
  a stale partial run is replaced, never mixed with the new one;
* a folder without ``demo_state.json``: refused (not made by the demo).

Every file of the run is written atomically by the steps themselves.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path

import pandas as pd

from ferl.io.persist import atomic_write_text

__all__ = ["DEMO", "PROFILES", "STEPS", "TINY", "DemoProfile", "fingerprint", "headline", "prepare_run_dir",
           "run_console_script", "run_demo", "step_commands"]

REPO_ROOT = Path(__file__).resolve().parents[1]
STATE_FILE = "demo_state.json"
#: The demo's steps, in order.
STEPS = ("detector", "heads", "openworld", "interventions", "shift", "report")
_SCRIPTS = {"detector": "train-detector", "heads": "fit-head", "openworld": "evaluate-openworld",
            "interventions": "evaluate-interventions", "shift": "evaluate-shift"}
#: How each step is typed in a shell (the report step runs in this process through `build_report`).
_SHELL = {**{step: [script] for step, script in _SCRIPTS.items()}, "report": ["python", "-m", "cbm.report"]}


@dataclass(frozen=True)
class DemoProfile:
    """Arguments of each step (besides the run / output folder options the demo adds).

    Attributes
    ----------
    name : str
    detector, heads, openworld, interventions, shift : tuple of str
        Arguments of ``train-detector``, ``fit-head``, ``evaluate-openworld``,
        ``evaluate-interventions`` and ``evaluate-shift``; config files are given relative to the
        repository root.
    head : str
        FERL head shown in the report (examples, rules, tree).
    """

    name: str
    detector: tuple[str, ...]
    heads: tuple[str, ...]
    openworld: tuple[str, ...]
    interventions: tuple[str, ...] = ("--config", "configs/interventions/default.yaml")
    shift: tuple[str, ...] = ("--config", "configs/shift/synthetic.yaml")
    head: str = "ferl-deep"
    configs: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        args = (*self.detector, *self.heads, *self.openworld, *self.interventions, *self.shift)
        object.__setattr__(self, "configs", tuple(
            args[i + 1] for i, a in enumerate(args[:-1]) if a == "--config"))


#: ``make demo``: the default world (20 classes x 120 images, 64 px), 3 detector epochs.
DEMO = DemoProfile(
    "demo",
    detector=("--config", "configs/detector/synthetic.yaml"),
    heads=("--config", "configs/head/default.yaml"),
    openworld=("--config", "configs/demo/openworld.yaml"),
)

_TINY_TRAINER = {"accelerator": "cpu", "devices": 1, "max_epochs": 1, "log_every_n_steps": 1,
                 "enable_progress_bar": False, "enable_model_summary": False}
_TINY_TRAINER_ARGS = tuple(a for k, v in _TINY_TRAINER.items()
                           for a in (f"--trainer.{k}", v if isinstance(v, str) else json.dumps(v)))
#: A seconds-long run of every step (tests, smoke checks): tiny worlds at 32 px, one epoch.
TINY = DemoProfile(
    "tiny",
    detector=("--config", "configs/detector/synthetic.yaml",
              "--data.dataset_kwargs", json.dumps({"n_per_class": 8, "n_classes": 8, "n_heldout": 2}),
              "--data.image_size", "32", *_TINY_TRAINER_ARGS),
    heads=("--config", "configs/head/default.yaml", "--heads", "ferl-medium,ferl-deep,lr"),
    openworld=("--config", "configs/demo/openworld.yaml", "--detector", json.dumps({
        "data": {"dataset": "synthetic", "image_size": 32, "batch_size": 32,
                 "dataset_kwargs": {"n_per_class": 6, "n_classes": 10, "n_heldout": 0, "p_swap": 0.1,
                                    "seed": 0}},
        "model": {"backbone": "resnet10t", "pretrained": False, "lr": 0.003},
        "monitor": "loss", "pos_weight": "none", "logger": "csv", "trainer": _TINY_TRAINER})),
    interventions=("--config", "configs/interventions/default.yaml", "--heads", "ferl-deep", "lr",
                   "--max-rows", "40"),
    shift=("--config", "configs/shift/synthetic.yaml", "--corruptions", '["gaussian_noise", "fog"]',
           "--severities", "[1, 5]", "--max-rows", "16", "--presets", "[]"),
)
PROFILES = {p.name: p for p in (DEMO, TINY)}


def fingerprint(profile: DemoProfile) -> str:
    """SHA-256 of the profile's arguments and the text of every config file it names.

    Raises
    ------
    FileNotFoundError
        A config file is missing.
    """
    doc = {"profile": [profile.detector, profile.heads, profile.openworld, profile.interventions,
                       profile.shift, profile.head], "configs": {}}
    for rel in profile.configs:
        path = REPO_ROOT / rel
        if not path.is_file():
            raise FileNotFoundError(f"config file {path} not found (the demo runs from a checkout)")
        doc["configs"][rel] = path.read_text()
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def _read_state(out: Path) -> dict | None:
    path = out / STATE_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        return {}  # a damaged state: treated as a stale run of unknown configuration


def _write_state(out: Path, state: dict) -> None:
    atomic_write_text(out / STATE_FILE, json.dumps(state, indent=1) + "\n")


def prepare_run_dir(out: str | os.PathLike, fp: str, fresh: bool = False,
                    say: Callable[[str], None] = print) -> dict:
    """Make ``out`` ready for a run with fingerprint ``fp`` (see the module docstring); return its state.

    Returns
    -------
    dict
        ``{"fingerprint", "done": [steps], "seconds": {step: s}, "complete": bool}``, already written.

    Raises
    ------
    FileExistsError
        ``out`` exists but was not made by the demo.
    """
    out = Path(out)
    previous = out.with_name(out.name + ".previous")
    state = _read_state(out) if out.exists() else None
    if state is None:
        if out.exists() and any(out.iterdir()):
            raise FileExistsError(f"{out} exists but was not made by the demo (no {STATE_FILE}); remove "
                                  "it or choose another output folder")
    elif state.get("complete"):
        if previous.exists():
            shutil.rmtree(previous)
        out.rename(previous)
        say(f"previous run moved to {previous} (removed when this run completes)")
    elif state.get("fingerprint") == fp and not fresh:
        say(f"resuming the unfinished run in {out} (finished steps: {', '.join(state['done']) or 'none'})")
        return state
    else:
        why = "as asked (--fresh)" if fresh else "made with another configuration"
        say(f"removing the unfinished run in {out} ({why})")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    state = {"fingerprint": fp, "done": [], "seconds": {}, "complete": False}
    _write_state(out, state)
    return state


def run_console_script(name: str, argv: Sequence[str]) -> None:
    """Call the installed console script ``name`` with ``argv`` in this process.

    Raises
    ------
    FileNotFoundError
        The script is not installed (``pip install -e .`` installs it).
    SystemExit
        The script's own error exit (its message says what went wrong).
    """
    found = entry_points(group="console_scripts", name=name)
    if not found:
        raise FileNotFoundError(f"console script {name!r} is not installed: run `make demo` or "
                                "`pip install -e .` in the repository first")
    next(iter(found)).load()(list(argv))


def step_commands(out: Path, profile: DemoProfile, resume_detector: bool = False,
                  threads: int | None = None) -> dict[str, list[str]]:
    """The argv of each step for output folder ``out`` (config paths relative to the working folder);
    ``threads`` adds ``--threads N`` to the console scripts."""
    def paths(args: Sequence[str]) -> list[str]:
        return [os.path.relpath(REPO_ROOT / a) if i and args[i - 1] == "--config" else a
                for i, a in enumerate(args)]

    cmds = {
        "detector": [*paths(profile.detector), "--run-dir", str(out)],
        "heads": [*paths(profile.heads), "--run", str(out)],
        "openworld": [*paths(profile.openworld), "--out", str(out / "openworld")],
        "interventions": [*paths(profile.interventions), "--run", str(out)],
        "shift": [*paths(profile.shift), "--run", str(out), "--out", str(out / "shift")],
        "report": [str(out), "--head", profile.head, "--openworld", str(out / "openworld"),
                   "--shift", str(out / "shift")],
    }
    if resume_detector:
        cmds["detector"] += ["--ckpt-path", "last"]
    for step in _SCRIPTS if threads is not None else ():
        cmds[step] += ["--threads", str(threads)]
    return cmds


def _shell(step: str, argv: Sequence[str]) -> str:
    return shlex.join([*_SHELL[step], *argv])


def run_demo(out: str | os.PathLike = "runs/demo", profile: DemoProfile = DEMO, *, fresh: bool = False,
             threads: int | None = None,
             runner: Callable[[str, Sequence[str]], None] = run_console_script,
             say: Callable[[str], None] = print) -> Path:
    """Run (or resume) the demo into ``out`` and return the path of its ``report.md``.

    Parameters
    ----------
    out : path-like
        Run directory (``runs/demo``); see the module docstring for what happens to an existing one.
    profile : DemoProfile
        :data:`DEMO` or :data:`TINY`.
    fresh : bool
        Discard an unfinished run instead of resuming it.
    threads : int, optional
        ``--threads`` of every console script (default: each sets the cores the process may use).
    runner : callable
        ``runner(script_name, argv)`` runs one console script (default :func:`run_console_script`).
    say : callable
        Progress messages.

    Raises
    ------
    FileExistsError
        ``out`` was not made by the demo.
    FileNotFoundError, SystemExit
        A config file or console script is missing, or a step failed (its message says why).
    """
    from cbm.report import build_report  # imported on use: it pulls in matplotlib and torch

    out = Path(out)
    state = prepare_run_dir(out, fingerprint(profile), fresh, say)
    last = out / "detector" / "checkpoints" / "last.ckpt"
    cmds = step_commands(out, profile, resume_detector="detector" not in state["done"] and last.is_file(),
                         threads=threads)
    shown = step_commands(out, profile)
    for i, step in enumerate(STEPS, 1):
        if step in state["done"]:
            say(f"[{i}/{len(STEPS)}] {step}: finished earlier, skipped")
            continue
        say(f"[{i}/{len(STEPS)}] {step}: {_shell(step, cmds[step])}")
        start = time.perf_counter()
        try:
            if step == "report":
                build_report(out, head=profile.head, openworld=out / "openworld", shift=out / "shift",
                             title=f"ferl-cbm demo ({profile.name} profile)",
                             commands=[_shell(s, shown[s]) for s in STEPS],
                             timings={s: state["seconds"][s] for s in STEPS[:-1]})
            else:
                runner(_SCRIPTS[step], cmds[step])
        except BaseException:  # Ctrl-C (Lightning turns it into SystemExit) or a failing step
            say(f"[{i}/{len(STEPS)}] {step}: stopped; run the demo again to resume the run in {out} "
                "from here")
            raise
        state["seconds"][step] = state["seconds"].get(step, 0.0) + time.perf_counter() - start
        state["done"].append(step)
        _write_state(out, state)
        say(f"[{i}/{len(STEPS)}] {step}: done in {state['seconds'][step]:.0f} s")
    state["complete"] = True
    _write_state(out, state)
    previous = out.with_name(out.name + ".previous")
    if previous.exists():
        shutil.rmtree(previous)
    return out / "report.md"


def headline(run_dir: str | os.PathLike, head: str = "ferl-deep") -> list[str]:
    """The run's headline numbers as text lines: test concept accuracy, the head's test accuracy on
    raw and calibrated concepts, and the open-world AUROC (mean over the folds run) of the head's
    novelty score (the kind its threshold uses) and of the best baseline."""
    run_dir = Path(run_dir)
    lines = []
    det = json.loads((run_dir / "detector" / "metrics.json").read_text())["splits"]
    lines.append("concept accuracy: "
                 + ", ".join(f"{split} {100 * m['concept_acc']:.1f} %" for split, m in det.items()))
    heads = json.loads((run_dir / "metrics.json").read_text())["fit_head"]["heads"]
    if head in heads:
        acc = {i: 100 * heads[head][i]["accuracy"] for i in ("raw", "calibrated")}
        lines.append(f"{head} test accuracy: raw {acc['raw']:.1f} %, calibrated {acc['calibrated']:.1f} %")
    per_fold = run_dir / "openworld" / "per_fold.csv"
    if per_fold.is_file():
        frame = pd.read_csv(per_fold)
        auroc = frame.groupby(["detector", "label"], sort=False)["auroc"].mean().reset_index()
        from cbm.report.summary import novelty_kind  # imported on use, as in run_demo

        kind = novelty_kind(run_dir, head)
        mine = auroc[auroc["detector"] == f"{head}:{kind}"]
        if mine.empty:
            mine = auroc[auroc["detector"].str.startswith(f"{head}:")]
        base = auroc[~auroc["detector"].str.startswith("ferl")]
        base = base.sort_values("auroc", ascending=False, kind="stable")
        shown = [*mine.head(1).itertuples(), *base.head(1).itertuples()]
        lines.append("open-world AUROC (held-out classes): "
                     + ", ".join(f"{r.label} {100 * r.auroc:.1f}" for r in shown)
                     + (" (best baseline)" if len(base) else ""))
    return lines
