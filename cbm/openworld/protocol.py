"""``evaluate-openworld``: the detector-class-disjoint open-world protocol (paper §5.2, Table 5).

:func:`run_openworld` draws (or reads) the class-disjoint folds, runs every (seed, fold) with
:func:`cbm.openworld.fold.run_fold` (held-out classes removed before detector training,
calibration, head and baseline fitting, and threshold selection; FERL against Mahalanobis, kNN and
Isolation Forest on the same calibrated concept vectors; attribute-naming precision@k), averages the
folds within each seed, reports mean ± std over seeds, and writes the tables, ROC curves and example
explanations (:mod:`cbm.openworld.report`). :func:`evaluate_openworld_main` is the command line::

    evaluate-openworld --config configs/openworld/synthetic.yaml --out runs/openworld/synthetic \\
        [--seeds 0 1 2] [--folds 0 1] [--detector-epochs 2] [--keep-checkpoints best] [--overwrite]

Finished folds are read back (and trained detectors with the same configuration reused) unless
``--overwrite``; every file is written atomically.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from jsonargparse import ActionConfigFile, ArgumentParser

from cbm.data import ConceptDataModule, load_folds
from cbm.data.tables import SampleTable
from cbm.detector.cli import detector_parser
from cbm.detector.train import quiet_library_noise
from cbm.jobs import console_main, phase
from cbm.openworld.fold import (
    PARTS,
    run_fold,
)
from cbm.openworld.report import FOLD_DIR, PAPER_TABLE5, write_report
from cbm.openworld.settings import KEEP_CHECKPOINTS, EvalSettings, check_keep_checkpoints
from cbm.runtime import add_threads_argument, set_threads
from ferl.benchmarks.ood import DETECTORS
from ferl.io.persist import atomic_write_text, folder_lock

__all__ = ["EvalSettings", "evaluate_openworld_main", "openworld_parser", "run_openworld"]

log = logging.getLogger(__name__)


# ----------------------------------------------------------------------------- the whole run
def _paper_key(paper: str, dataset: str, n_classes: int) -> str | None:
    """Table 5 column to print beside ours: ``cub200``, ``awa2`` or None."""
    if paper != "auto":
        return None if paper == "none" else paper
    if dataset in ("awa2", "awa_features"):
        return "awa2"
    return "cub200" if dataset == "cub" and n_classes == 200 else None


def _base_detector(detector: Mapping, data_root: str | None) -> dict:
    """The train-detector config shared by every fold; the data split seed is pinned."""
    det = copy.deepcopy(dict(detector))
    data = det.setdefault("data", {})
    if data_root is not None:
        data["data_root"] = data_root
    kwargs = data.setdefault("dataset_kwargs", {}) or {}
    kwargs.setdefault("seed", int(data.get("seed", 0)))
    data["dataset_kwargs"] = kwargs
    det["export_splits"] = list(PARTS)
    return det


def run_openworld(
    detector: Mapping[str, Any],
    out: str | os.PathLike,
    *,
    name: str = "openworld",
    seeds: Sequence[int] = (0,),
    folds: Sequence[int] | None = None,
    n_folds: int = 5,
    fold_seed: int = 0,
    folds_path: str | None = None,
    settings: EvalSettings | None = None,
    detector_epochs: int | None = None,
    data_root: str | None = None,
    paper: str = "auto",
    overwrite: bool = False,
    keep_checkpoints: str = "none",
    table: SampleTable | None = None,
    config_text: str | None = None,
) -> dict[str, Any]:
    """Run the open-world protocol over ``seeds`` x ``folds`` and write the report into ``out``.

    Parameters
    ----------
    detector : mapping
        A train-detector configuration (``configs/detector/*.yaml`` layout: ``data``, ``model``,
        ``trainer``, ``monitor``, ``pos_weight``, ``logger``); ``run_dir``, ``seed``,
        ``export_splits`` and the fold options are set per fold.
    out : path-like
        Output folder: ``folds.json``, ``config.yaml``, ``run.json``, ``per_fold.csv``,
        ``summary.csv``, ``report.md``, ``examples.md``, ``roc.png`` and ``seed<s>/fold<i>/``.
    name : str
        Title of the report.
    seeds : sequence of int
        Detector seeds (the data split stays fixed: ``data.dataset_kwargs.seed``).
    folds : sequence of int, optional
        Fold subset (default: all).
    n_folds, fold_seed, folds_path
        How the class-disjoint folds are drawn, or a saved folds file.
    settings : EvalSettings, optional
    detector_epochs : int, optional
        Overrides ``trainer.max_epochs`` (short CPU runs on image data sets).
    data_root : str, optional
        Overrides ``data.data_root``.
    paper : str
        ``auto`` / ``awa2`` / ``cub200`` / ``none``: the paper column of the table.
    overwrite : bool
        Recompute every selected fold (else finished folds are read back and trained detectors
        with the same configuration are reused).
    keep_checkpoints : {"none", "best", "all"}
        Detector checkpoints each trained fold keeps; the protocol itself needs only the exported
        concept tables (default ``none``: every fold's checkpoints add up; sizes in
        docs/results/openworld.md).
    table : SampleTable, optional
        An already-loaded data set (then ``data.dataset`` only picks the transform defaults).
    config_text : str, optional
        The configuration to save as ``config.yaml``.

    Returns
    -------
    dict
        ``results`` (one dict per seed and fold), ``files`` (written paths) and ``record``.

    Raises
    ------
    ValueError
        Bad options, fold indices out of range, an output folder holding other folds or other
        detectors (without ``overwrite``), or a leak of a held-out class into a fitting step.
    """
    settings = settings or EvalSettings()
    check_keep_checkpoints(keep_checkpoints)
    if not seeds:
        raise ValueError("give at least one seed")
    if paper not in ("auto", "none", *PAPER_TABLE5):
        raise ValueError(f"paper must be auto, none or one of {list(PAPER_TABLE5)}, got {paper!r}")
    out = Path(out)
    start = time.perf_counter()
    base = _base_detector(detector, data_root)
    if (base.get("model") or {}).get("freeze_backbone"):  # every fold reads the same cached features
        base.setdefault("feature_cache", str(out / "features"))
    if detector_epochs is not None:
        if detector_epochs < 1:
            raise ValueError(f"detector_epochs must be >= 1, got {detector_epochs}")
        base.setdefault("trainer", {})["max_epochs"] = int(detector_epochs)
    base["data"].update(n_folds=n_folds, fold_seed=fold_seed, folds_path=folds_path, fold=None)
    cfg0 = detector_parser().parse_object({**base, "run_dir": str(out), "seed": int(seeds[0])})
    dm = ConceptDataModule(**cfg0.data.as_dict(), table=table)
    table = dm.table
    all_folds = dm.folds
    folds_file = out / "folds.json"
    if folds_file.is_file() and not overwrite:
        if load_folds(folds_file) != all_folds:
            raise ValueError(f"{folds_file} holds other folds; pass --overwrite or choose another --out")
    else:
        dm.save_folds(folds_file)
    chosen = list(range(len(all_folds))) if folds is None else [int(f) for f in folds]
    bad = [f for f in chosen if not 0 <= f < len(all_folds)]
    if bad or not chosen:
        raise ValueError(f"folds {bad or 'none'} out of range 0..{len(all_folds) - 1}")

    results = []
    for s in seeds:
        for f in chosen:
            det = copy.deepcopy(base)
            det.update(run_dir=str(out / FOLD_DIR.format(seed=s, fold=f)), seed=int(s))
            det["data"].update(fold=f, folds_path=str(folds_file.resolve()), seed=int(s))
            log.info("open-world: seed %s, fold %s (held out %s)", s, f, all_folds[f].held_out)
            with phase(f"running seed {s}, fold {f}", f"the folds finished so far are in {out} (each with "
                       "its result.json); rerun the same command to go on: finished folds are read back"):
                res = run_fold(table, all_folds[f], int(s), det["run_dir"], det, settings,
                               overwrite=overwrite, examples=s == seeds[0], keep_checkpoints=keep_checkpoints)
            if res["status"] == "done":
                log.info("open-world: seed %s, fold %s read back (evaluated earlier)", s, f)
            else:
                log.info("open-world: seed %s, fold %s %s in %.0f s", s, f, res["status"], res["seconds"])
            results.append(res)
    record = {
        "name": name, "command": sys.argv, "out": str(out), "seeds": [int(s) for s in seeds],
        "folds": chosen, "n_folds": len(all_folds), "fold_seed": fold_seed, "folds_path": folds_path,
        "dataset": cfg0.data.dataset, "dataset_kwargs": cfg0.data.dataset_kwargs,
        "input_kind": dm.input_kind, "n_concepts": dm.n_concepts, "fold_classes": dm.fold_classes,
        "detector_epochs_override": detector_epochs, "keep_checkpoints": keep_checkpoints,
        "settings": settings.to_dict(),
        "paper": _paper_key(paper, cfg0.data.dataset, dm.fold_classes),
        "per_fold": [{"seed": r["seed"], "fold": r["fold"], "status": r["status"], "seconds": r["seconds"],
                      "held_out": r["held_out_names"], "detector": r["detector"]} for r in results],
        "wall_seconds": round(time.perf_counter() - start, 1),
    }
    files = write_report(out, results, record)
    if config_text is not None:  # only once every fold has accepted this configuration
        files["config"] = atomic_write_text(out / "config.yaml", config_text)
    files["run"] = atomic_write_text(out / "run.json", json.dumps(record, indent=1) + "\n")
    files["folds"] = folds_file
    return {"results": results, "files": files, "record": record}


# ----------------------------------------------------------------------------- command line
def openworld_parser() -> ArgumentParser:
    """The ``evaluate-openworld`` argument parser (every option can also be set in ``--config``)."""
    p = ArgumentParser(prog="evaluate-openworld",
                       description="Class-disjoint open-world evaluation of FERL against dedicated OOD "
                                   "detectors on calibrated concept vectors (paper §5.2, Table 5).")
    p.add_argument("--config", action=ActionConfigFile, help="YAML config (configs/openworld/*.yaml)")
    p.add_argument("--name", type=str, default="openworld", help="report title")
    p.add_argument("--out", type=str | None, default=None,
                   help="output folder (default runs/openworld/<name>)")
    p.add_argument("--detector", type=dict, default={},
                   help="train-detector config (data/model/trainer/monitor/pos_weight/logger)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0], help="detector seeds")
    p.add_argument("--folds", type=int, nargs="+", default=None, help="fold subset (default: all)")
    p.add_argument("--n-folds", type=int, default=5, help="class-disjoint folds")
    p.add_argument("--fold-seed", type=int, default=0, help="seed of the fold partition")
    p.add_argument("--folds-path", type=str | None, default=None, help="read the folds from this JSON")
    p.add_argument("--heads", type=str, nargs="+", default=list(EvalSettings.heads), help="FERL heads")
    p.add_argument("--ferl-kinds", type=str, nargs="+", default=list(EvalSettings.ferl_kinds),
                   help="FERL OOD scores; the first one is used in the examples")
    p.add_argument("--baselines", type=str, nargs="+", default=list(EvalSettings.baselines),
                   help=f"dedicated detectors, of {list(DETECTORS)}")
    p.add_argument("--accept", type=float, default=EvalSettings.accept,
                   help="retained val fraction each threshold accepts")
    p.add_argument("--top-k", type=int, nargs="+", default=list(EvalSettings.top_k),
                   help="attribute-naming precision@k")
    p.add_argument("--examples-per-fold", type=int, default=EvalSettings.examples_per_fold,
                   help="held-out images explained per fold in examples.md (first seed only)")
    p.add_argument("--coverage", type=float, default=EvalSettings.coverage,
                   help="target coverage of the heads' credal sets (as fit-head's)")
    p.add_argument("--max-set-size", type=int, default=EvalSettings.max_set_size,
                   help="the widest set a head answers with (as fit-head's)")
    p.add_argument("--train-concepts", type=Literal["auto", "cross-fitted", "in-sample"],
                   default=EvalSettings.train_concepts,
                   help="training vectors of heads and baselines: 'auto' = cross-fitted when the detector "
                        "config sets crossfit_folds, else in-sample")
    p.add_argument("--paper", type=str, default="auto", help="auto | awa2 | cub200 | none")
    p.add_argument("--detector-epochs", type=int | None, default=None, help="override trainer.max_epochs")
    p.add_argument("--data-root", type=str | None, default=None, help="override data.data_root")
    p.add_argument("--overwrite", action="store_true", help="recompute finished folds")
    p.add_argument("--keep-checkpoints", type=Literal[KEEP_CHECKPOINTS], default="none",
                   help="detector checkpoints each trained fold keeps (default none: the protocol "
                        "reads only the exported concept tables)")
    add_threads_argument(p)
    return p


def evaluate_openworld_main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``evaluate-openworld``; prints where the report went and the headline table.

    The job holds the output folder's write lock (a second job on the same ``--out`` stops at once).
    Bad options (e.g. ``--folds 99``), data and file errors end with one ``evaluate-openworld:
    error: <message>`` line (exit status 1); SIGTERM / SIGINT with one line saying which folds were
    kept (:func:`cbm.jobs.console_main`).
    """
    parser = openworld_parser()
    cfg = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    quiet_library_noise()
    out = Path(cfg.out or Path("runs") / "openworld" / cfg.name)

    def job() -> dict:
        set_threads(cfg.threads)
        if not cfg.detector:
            raise ValueError("no detector configuration: give --config with a 'detector:' section")
        settings = EvalSettings(heads=tuple(cfg.heads), ferl_kinds=tuple(cfg.ferl_kinds),
                                baselines=tuple(cfg.baselines), accept=cfg.accept, top_k=tuple(cfg.top_k),
                                examples_per_fold=cfg.examples_per_fold, train_concepts=cfg.train_concepts,
                                coverage=cfg.coverage, max_set_size=cfg.max_set_size)
        with folder_lock(out), phase("preparing the folds", f"{out} holds at most its folds.json besides "
                                                              "what it held before"):
            return run_openworld(cfg.detector, out, name=cfg.name, seeds=cfg.seeds, folds=cfg.folds,
                                 n_folds=cfg.n_folds, fold_seed=cfg.fold_seed, folds_path=cfg.folds_path,
                                 settings=settings, detector_epochs=cfg.detector_epochs,
                                 data_root=cfg.data_root, paper=cfg.paper, overwrite=cfg.overwrite,
                                 keep_checkpoints=cfg.keep_checkpoints, config_text=parser.dump(cfg))

    run = console_main("evaluate-openworld", job)
    print((out / "report.md").read_text().split("\n## ")[1] if (out / "report.md").is_file() else "")
    print(f"report: {run['files']['report']}  ({run['record']['wall_seconds']:.0f} s)")
