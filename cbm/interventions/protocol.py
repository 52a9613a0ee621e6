"""``evaluate-interventions``: intervention curves of every head x policy on one or more runs.

For each run directory (a ``train-detector`` + ``fit-head`` run, or every ``seed*/fold*`` fold of
an ``evaluate-openworld`` output folder), each head x fit (:mod:`cbm.interventions.run`) and each
policy (:mod:`cbm.heads.policies`), :func:`evaluate_run` measures the curve of
:func:`cbm.interventions.curves.intervention_curve` on the test split and, where the run has one,
on the held-out classes' ``novel`` split (OOD score and its AUROC against the test split at the
same k). :func:`evaluate_interventions` writes, atomically, into each run's ``interventions/``
folder (and, for several runs, into ``out``)::

    curves.csv        one row per run x head x fit x policy x split x k
    true_concepts.csv test accuracy of every head x fit on the expert values of the true concepts
    interventions.md  the tables (:mod:`cbm.interventions.report`)
    interventions.png the curves
    summary.json      settings, runs, rows, groups and file names
"""

from __future__ import annotations

import io
import json
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from cbm.heads.interventions import EXPERT_MODES, head_outputs, is_evidential
from cbm.heads.policies import POLICIES
from cbm.interventions.curves import intervention_curve, k_grid
from cbm.interventions.report import curves_figure, curves_markdown
from cbm.interventions.run import FITS, RunConcepts, load_concepts, open_head
from ferl import metrics as M
from ferl.io.persist import atomic_write_bytes, atomic_write_text
from ferl.novelty.ood_score import check_kind

__all__ = ["OUT_DIR", "InterventionSettings", "check_comparable", "evaluate_interventions", "evaluate_run",
           "run_dirs"]

log = logging.getLogger(__name__)

#: Folder of a run that receives its intervention outputs.
OUT_DIR = "interventions"


@dataclass(frozen=True)
class InterventionSettings:
    """What ``evaluate-interventions`` measures.

    Attributes
    ----------
    heads : tuple of str
        Registry heads.
    fits : tuple of str
        ``sequential`` (fit-head's heads) and / or ``independent`` (fitted on the true concepts).
    inputs : {"raw", "calibrated"}
    policies : tuple of str
        Of :data:`cbm.heads.policies.POLICIES` (``evidence`` runs on FERL heads only).
    splits : tuple of str
        ``test`` and / or ``novel`` (held-out classes; skipped where the run has none).
    ks : tuple of int or None
        Answered-group counts measured (None: every k up to 30 groups, a sparse grid beyond).
    max_rows : int or None
        Rows per split (a seeded random subset when the split is larger).
    expert : {"auto", "labels", "percentiles"}
    ood_kind : str or None
        FERL's OOD score, a kind of `ferl.novelty.ood_score.OOD_KINDS`; None: each head's own, the kind
        ``predict`` flags with (:attr:`cbm.heads.FERLHead.ood_kind`).
    seed : int
        Seed of the heads fitted here, the row subset and the random policy.
    """

    heads: tuple = ("ferl-deep", "ferl-medium", "ferl-compact", "cart", "lr")
    fits: tuple = FITS
    inputs: str = "calibrated"
    policies: tuple = POLICIES
    splits: tuple = ("test", "novel")
    ks: tuple | None = None
    max_rows: int | None = 2000
    expert: str = "auto"
    ood_kind: str | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        checks = (("fits", self.fits, FITS), ("policies", self.policies, POLICIES),
                  ("splits", self.splits, ("test", "novel")))
        for what, given, allowed in checks:
            bad = [v for v in given if v not in allowed]
            if bad or not given:
                raise ValueError(f"unknown or no {what} {bad}; choose from {list(allowed)}")
        if "test" not in self.splits:  # the curves' accuracy, and the held-out AUROC, are measured on it
            raise ValueError(f"splits must include 'test' (the held-out classes' AUROC is measured against "
                             f"it), got {list(self.splits)}")
        if not self.heads:
            raise ValueError("give at least one head")
        if self.inputs not in ("raw", "calibrated"):
            raise ValueError(f"inputs must be 'raw' or 'calibrated', got {self.inputs!r}")
        if self.expert not in EXPERT_MODES:
            raise ValueError(f"expert must be one of {list(EXPERT_MODES)}, got {self.expert!r}")
        if self.ood_kind is not None:
            check_kind(self.ood_kind, "ood_kind")
        if self.max_rows is not None and self.max_rows < 1:
            raise ValueError(f"max_rows must be >= 1 or null, got {self.max_rows}")
        if self.ks is not None and (not self.ks or min(self.ks) < 0):
            raise ValueError(f"ks must be non-negative integers or null, got {self.ks}")

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


def run_dirs(path: str | os.PathLike) -> list[tuple[str, Path]]:
    """``(name, folder)`` of the runs under ``path``: the folds of an evaluate-openworld output
    (``seed*/fold*``), else ``path`` itself. FileNotFoundError when ``path`` is not a folder."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"{path} is not a folder: give a run directory (train-detector + fit-head) "
                                "or an evaluate-openworld output folder")
    folds = sorted(p for p in path.glob("seed*/fold*") if (p / "concepts" / "train.npz").is_file())
    if (path / "folds.json").is_file() and folds:
        return [(str(p.relative_to(path)), p) for p in folds]
    return [(path.name, path)]


def _subset(n: int, max_rows: int | None, rng: np.random.Generator) -> np.ndarray:
    if max_rows is None or n <= max_rows:
        return np.arange(n)
    return np.sort(rng.choice(n, max_rows, replace=False))


def evaluate_run(name: str, run_dir: Path, settings: InterventionSettings,
                 run: RunConcepts | None = None) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """Curves of one run: (long table, true-concept accuracies, info with rows and groups); ``run``:
    its tables already read (:func:`cbm.interventions.run.load_concepts`)."""
    run = load_concepts(run_dir) if run is None else run
    rng = np.random.default_rng(settings.seed)
    train_classes = np.unique(run.tables["train"].y)
    rows = {}
    for split in sorted(settings.splits, key=("test", "novel").index):  # test first: novel AUROC needs it
        if split not in run.tables:
            log.info("%s: no %s split, skipped", name, split)
            continue
        table = run.tables[split]
        keep = np.flatnonzero(np.isin(table.y, train_classes) == (split == "test"))
        rows[split] = keep[_subset(keep.size, settings.max_rows, rng)]
    if "test" not in rows or rows["test"].size == 0:
        raise ValueError(f"{run_dir}: the test split has no rows of training classes")
    records, truth = [], []
    ks = k_grid(run.groups.n_groups, settings.ks)
    for head_name in settings.heads:
        for fit in settings.fits:
            rh = open_head(run, head_name, fit, settings.inputs, settings.expert, settings.seed)
            test = run.tables["test"]
            y_idx = rh.head.class_index(run.class_names[test.y[rows["test"]]])
            answers_test = test.concept_labels[rows["test"]]
            true_pred = head_outputs(rh.head, rh.expert(answers_test), ood=False).pred
            kind = (settings.ood_kind or rh.head.ood_kind) if is_evidential(rh.head) else None
            truth.append({"run": name, "head": head_name, "fit": fit, "ood_kind": kind,
                          "true_concepts_accuracy": M.accuracy(y_idx, true_pred)})
            for policy in settings.policies:
                if policy == "evidence" and not is_evidential(rh.head):
                    continue
                start = time.process_time()
                ood = {}
                for split, idx in rows.items():
                    table = run.tables[split]
                    features = None if table.feature_score is None else table.feature_score[idx]
                    curve = intervention_curve(
                        rh.head, rh.concepts(split)[idx], table.concept_labels[idx], run.groups, rh.expert,
                        policy, ks, settings.seed, y_idx if split == "test" else None, kind, features)
                    ood[split] = curve.ood
                    for point in curve.points:
                        auroc = (M.ood_auroc(ood["test"][point["k"]], curve.ood[point["k"]])
                                 if split == "novel" and curve.ood and "test" in ood else float("nan"))
                        records.append({"run": name, "head": head_name, "fit": fit, "policy": policy,
                                        "split": split, **point, "auroc": auroc})
                log.info("%s: %s (%s) %s in %.1f s CPU", name, head_name, fit, policy,
                         time.process_time() - start)
    info = {"rows": {s: int(r.size) for s, r in rows.items()}, "n_groups": run.groups.n_groups,
            "n_one_hot": int(sum(run.groups.exclusive)), "groups": list(run.groups.names)}
    return pd.DataFrame(records), pd.DataFrame(truth), info


def _difference(a: Sequence, b: Sequence) -> str:
    only_a, only_b = [x for x in a if x not in b], [x for x in b if x not in a]
    if not only_a and not only_b:
        return "the same ones in another order"
    return f"only in the first: {only_a[:5]}, only in the second: {only_b[:5]}"


def check_comparable(runs: Sequence[tuple[str, RunConcepts]]) -> None:
    """Raise ValueError unless every run has the first run's concepts, concept groups and classes
    (in order), which a mean over runs needs (curves of other groups or classes were averaged into a
    meaningless "100.0 ± 0.0").

    Parameters
    ----------
    runs : sequence of (name, RunConcepts)
    """
    (first, ref), *rest = runs
    for name, run in rest:
        groups = [(g, [run.groups.concept_names[j] for j in m])
                  for g, m in zip(run.groups.names, run.groups.members, strict=True)]
        ref_groups = [(g, [ref.groups.concept_names[j] for j in m])
                      for g, m in zip(ref.groups.names, ref.groups.members, strict=True)]
        pairs = (("concepts", list(ref.groups.concept_names), list(run.groups.concept_names)),
                 ("concept groups", [f"{g}: {m}" for g, m in ref_groups], [f"{g}: {m}" for g, m in groups]),
                 ("classes", [str(c) for c in ref.class_names], [str(c) for c in run.class_names]))
        for what, a, b in pairs:
            if a != b:
                raise ValueError(f"runs {first!r} and {name!r} have other {what} ({_difference(a, b)}): "
                                 "their curves cannot be averaged; evaluate them separately")


def _write(out: Path, frame: pd.DataFrame, truth: pd.DataFrame, info: dict) -> dict[str, Path]:
    """Write the measurements first (the curves and the true-concept accuracies), then what is drawn
    from them, so that a failing report or figure loses no computation."""
    files = {
        "curves": atomic_write_text(out / "curves.csv", frame.to_csv(index=False)),
        "true_concepts": atomic_write_text(out / "true_concepts.csv", truth.to_csv(index=False)),
    }
    buf = io.BytesIO()
    curves_figure(frame).savefig(buf, format="png", dpi=80)
    files["markdown"] = atomic_write_text(out / "interventions.md", curves_markdown(frame, truth, info))
    files["figure"] = atomic_write_bytes(out / "interventions.png", buf.getvalue())
    doc = {**info, "files": {k: p.name for k, p in files.items()}}
    files["summary"] = atomic_write_text(out / "summary.json", json.dumps(doc, indent=1) + "\n")
    return files


def evaluate_interventions(runs: str | os.PathLike | Sequence[str | os.PathLike],
                           settings: InterventionSettings | None = None, out: str | os.PathLike | None = None,
                           title: str = "Concept interventions") -> dict:
    """Evaluate every run, write its ``interventions/`` folder, and the combined results into ``out``.

    Parameters
    ----------
    runs : path-like or sequence of path-like
        Run directories or evaluate-openworld output folders (each fold is a run).
    settings : InterventionSettings, optional
    out : path-like, optional
        Folder of the combined results (mean ± std over every run); required for several runs.
        Each run's own results always go to its ``interventions/`` folder (an open-world folder's
        combined ones to its own); with one run and ``out``, ``out`` gets them too.
    title : str
        Title of the Markdown report.

    Returns
    -------
    dict
        ``frame`` (every curve point), ``truth``, ``files`` (the combined files) and ``info``.

    Raises
    ------
    FileNotFoundError, ValueError
        A missing or invalid run, bad settings, several runs without ``out``, runs of other concepts,
        concept groups or classes (:func:`check_comparable`, before anything is computed).
    """
    settings = settings or InterventionSettings()
    if isinstance(runs, (str, os.PathLike)):  # one run, not a sequence of one-character runs
        runs = [runs]
    if not runs:
        raise ValueError("give at least one run directory")
    found = [(label, path, Path(root)) for root in runs for label, path in run_dirs(root)]
    if out is None and len(runs) > 1:
        raise ValueError("several runs need --out for the combined results")
    if out is not None and Path(out).exists() and not Path(out).is_dir():
        raise ValueError(f"--out {out} is a file, not a folder")
    names = [label if path == root else f"{root.name}/{label}" for label, path, root in found]
    loaded = [load_concepts(path) for _, path, _ in found]
    check_comparable(list(zip(names, loaded, strict=True)))
    frames, truths, infos = [], [], []
    files = {}
    for name, (_, path, _), run in zip(names, found, loaded, strict=True):
        frame, truth, info = evaluate_run(name, path, settings, run)
        frames.append(frame)
        truths.append(truth)
        infos.append(info)
        files = _write(path / OUT_DIR, frame, truth, {"title": f"{title}: {name}", "runs": [name],
                                                      "settings": settings.to_dict(), **info})
    frame, truth = pd.concat(frames, ignore_index=True), pd.concat(truths, ignore_index=True)
    rows = {s: int(sum(i["rows"].get(s, 0) for i in infos)) for s in settings.splits}
    info = {"title": title, "runs": list(dict.fromkeys(frame["run"])), "settings": settings.to_dict(),
            **{k: v for k, v in infos[0].items() if k != "rows"}, "rows": rows}
    if len(found) > 1 or out is not None:  # one run with --out: its own files and a copy in out
        files = _write(Path(out) if out is not None else Path(runs[0]) / OUT_DIR, frame, truth, info)
    return {"frame": frame, "truth": truth, "files": files, "info": info}
