"""The ``fit-head`` job: per-concept calibration and every head on raw and calibrated concepts.

``fit-head --run runs/<name>`` (or ``--concepts <dir> --out <dir>`` for tables made elsewhere)

1. reads ``concepts/{train,val,test}.npz`` (:func:`cbm.data.concept_tables.load_concept_tables`: NaN or
   out-of-[0, 1] probabilities raise an error naming split, row and concept; concept or class
   names that differ between the tables raise);
2. fits a :class:`cbm.concepts.calibration.ConceptCalibrator` on **val** and writes ``calibration.json``;
3. fits every requested head (:mod:`cbm.heads`) on **train** twice, on raw and on calibrated concept
   probabilities, and evaluates it on **test** (:func:`evaluate_head`). The training vectors are the
   detector's cross-fitted (out-of-fold) train concepts when the run has them, else its in-sample
   ones (``--train-concepts``, :mod:`cbm.heads.train_concepts`), with an answered copy for CART heads
   (:func:`cbm.heads.interventions.training_rows`); the other sources, and the true concepts (Koh et
   al.'s independent head), are fitted too and reported beside them;
4. writes ``head/<name>/{raw,calibrated}/`` (``head.json`` with, for FERL heads, the novelty
   threshold accepting 95 % of val (:meth:`cbm.heads.FERLHead.fit_ood_threshold`) and the operating
   point (:mod:`cbm.heads.operating`: the shift-adaptive set, abstention and flags, calibrated on val
   and ``concepts/val_shift.npz``), ``model.json``, ``model.npz``, ``rules.md`` with concept names),
   merges a ``fit_head`` entry into ``metrics.json``, and writes ``tables/heads.{md,csv}`` laid out
   like the paper's Table 4 (:mod:`cbm.heads.tables`).

Test classes absent from train are an error, unless the run is open-world (``config.yaml`` sets
``data.fold``, or ``--open-world true``): then those rows are left out of the metrics and counted.

Nothing is written before every head is fitted; then ``calibration.json``, the head folders,
``metrics.json`` and the tables are replaced together (:class:`ferl.io.persist.StepWriter`): a job
stopped at any point (error, signal, kill) leaves the previous results whole. The job holds the
folder's write lock: a second job on it stops at once, naming the first (`ferl.io.persist.folder_lock`).
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
import warnings
from collections import Counter
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Literal

import numpy as np
from jsonargparse import ActionConfigFile, ArgumentParser

from cbm.concepts.calibration import ConceptCalibrator, concept_ece, crossfit_calibrate
from cbm.data.concept_tables import SHIFT_SPLIT, ConceptTable, load_concept_tables
from cbm.heads import HEADS, ConceptHead, FERLHead, make_head
from cbm.heads.evaluate import conformal_metrics, evaluate_head
from cbm.heads.held_out import Shift, shift_inputs
from cbm.heads.interventions import training_rows
from cbm.heads.models import FERL_SETTINGS
from cbm.heads.operating import MAX_SET_SIZE, fit_operating_point
from cbm.heads.run_files import paper_dataset, read_metrics, read_run_config
from cbm.heads.tables import heads_frame, heads_markdown
from cbm.heads.train_concepts import TRAIN_CONCEPTS, crossfit_table, resolve_train_concepts, train_inputs
from cbm.jobs import console_main, phase
from cbm.runtime import add_threads_argument, set_threads
from ferl.io.persist import StepWriter, folder_lock

__all__ = ["INPUTS", "evaluate_head", "fit_head", "fit_head_main", "fit_head_parser"]

#: Share of the val inputs the novelty threshold accepts (the open-world protocol's rule, paper Table 3).
ACCEPT = 0.95

log = logging.getLogger(__name__)

#: The two concept representations every head is fitted on (Table 4 columns).
INPUTS = ("raw", "calibrated")


#: Heads sized by another head's fit: (head, the head it follows, what it takes from it).
_SIZED_BY = (("lr-restricted", "ferl-deep", "concept count"), ("cart-compact", "ferl-compact", "leaf count"))


def _head_options(name: str, results: dict, kind: str, ferl_settings: str) -> dict:
    """A head's registry options: a FERL head's settings, a sized head's size (`_SIZED_BY`)."""
    if name.startswith("ferl-"):
        return {"settings": ferl_settings}
    if name == "lr-restricted":
        return {"n_concepts": results["ferl-deep"][kind]["size"]["concepts_used"]}
    if name == "cart-compact":
        return {"max_leaf_nodes": max(results["ferl-compact"][kind]["size"]["rules"], 2)}
    return {}


def _resolve_heads(heads: Sequence[str]) -> list[str]:
    unknown = [h for h in heads if h not in HEADS]
    if unknown or not heads:
        raise ValueError(f"unknown or no heads {unknown}; known heads: {list(HEADS)}")
    wanted = set(heads)
    for follower, leader, what in _SIZED_BY:
        if follower in wanted and leader not in wanted:
            log.info("%s takes its %s from %s: fitting %s too", follower, what, leader, leader)
            wanted.add(leader)
    return [h for h in HEADS if h in wanted]  # registry order: each leader before its follower


def _calibration_summary(tables, calibrated) -> dict:
    out: dict = {"fitted_on": "val"}
    for split in ("val", "test"):
        t = tables[split]
        raw, cal = concept_ece(t.probs, t.concept_labels), concept_ece(calibrated[split], t.concept_labels)
        out[split] = {"concept_ece_raw_mean": float(raw.mean()),
                      "concept_ece_calibrated_mean": float(cal.mean()),
                      "concept_ece_raw": raw.tolist(), "concept_ece_calibrated": cal.tolist()}
    return out


def _fit_heads(names: Sequence[str], X_train: dict, X_val: dict, X_test: dict, y_train: np.ndarray,
               y_val: np.ndarray, y_test: np.ndarray, concept_names: list[str], seed: int, source: str,
               ferl_settings: str = "concepts", coverage: float | None = 0.9, X_sets: dict | None = None,
               shift: Shift | None = None, max_set_size: int = MAX_SET_SIZE,
               answers: ConceptTable | None = None) -> tuple[dict, dict[tuple[str, str], ConceptHead]]:
    """Fit every head on both input kinds (on `training_rows` of the train table ``answers``, None for
    true-label inputs) and evaluate it (FERL heads with their novelty threshold and
    their operating point, `cbm.heads.operating`, calibrated on ``X_sets``, the val rows calibrated
    out of sample (`cbm.concepts.calibration.crossfit_calibrate`; ``X_val`` when None), and on the
    shift-calibration rows of ``shift``: what every command reads; every head with split-conformal
    sets at ``coverage``); returns the results and the fitted heads by (name, kind)."""
    X_sets = X_val if X_sets is None else X_sets
    shift = Shift() if shift is None else shift
    results: dict = {name: {} for name in names}
    fitted: dict[tuple[str, str], ConceptHead] = {}
    for kind in INPUTS:
        for name in names:
            start = time.perf_counter()
            head = make_head(name, seed=seed, **_head_options(name, results, kind, ferl_settings))
            head.fit(*training_rows(head, X_train[kind], y_train, answers, seed), concept_names)
            fit_seconds = time.perf_counter() - start
            if isinstance(head, FERLHead):
                # val calibrated out of sample, like test; the sets first (the discount reads them),
                # the threshold last (of the kind the calibration makes the head's own)
                head.fit_sets(X_sets[kind], y_val, coverage)
                head.fit_novelty(X_sets[kind][np.isin(y_val, head.classes_)], 1.0 - ACCEPT)
                head.fit_ood_threshold(X_sets[kind], ACCEPT)
                if coverage is not None:
                    fit_operating_point(head, X_sets[kind], y_val, shift.feature_val, shift.rows(kind),
                                        coverage, max_set_size)
            metrics = evaluate_head(head, X_test[kind], y_test, concept_names, shift.feature_test)
            if coverage is not None:
                metrics.update(conformal_metrics(head, X_sets[kind], y_val, X_test[kind], y_test, coverage))
            fitted[name, kind] = head
            results[name][kind] = {**metrics, "size": head.size(), "fit_seconds": round(fit_seconds, 3)}
            log.info("%s (%s, %s train concepts): accuracy %.4f", name, kind, source, metrics["accuracy"])
    return results, fitted


#: What fit-head does with each split's concept table (each needs rows).
_SPLIT_USES = {"train": "the heads are fitted", "val": "the calibrator and the sets are fitted",
               "test": "the heads are evaluated"}


def _warn_coverage(coverage: float | None, n: int) -> None:
    """Warn when ``n`` val rows cannot certify ``coverage``: split conformal needs
    ``ceil((n + 1) coverage) <= n`` rows, else every credal set holds every class."""
    def certifies(rows: int) -> bool:
        return math.ceil((rows + 1) * coverage - 1e-9) <= rows

    if coverage is not None and n and not certifies(n):
        need = next(m for m in range(max(int(coverage / (1 - coverage)) - 1, n), 10**9) if certifies(m))
        warnings.warn(f"--coverage {coverage:g} cannot be certified by the {n} val rows of the training "
                      f"classes: they certify at most {n / (n + 1):.4g} (split conformal needs at least "
                      f"{need} rows); every FERL credal set will hold "
                      "every class. Lower --coverage or give the val split more rows.", UserWarning,
                      stacklevel=3)


def _say_abstention(results: dict) -> None:
    """One line: each FERL head's test abstention at its operating point (wide sets abstain)."""
    rates = [f"{name} {100 * fit['abstention_rate']:.1f} %" for name, kinds in results.items()
             for kind, fit in kinds.items() if kind == "calibrated" and "abstention_rate" in fit]
    if rates:
        log.info("abstention on calibrated test concepts at the operating point (sets wider than "
                 "--max-set-size abstain): %s", ", ".join(rates))


def fit_head(
    concepts: str | os.PathLike,
    out: str | os.PathLike,
    heads: Sequence[str] = tuple(HEADS),
    seed: int = 0,
    dataset: str = "auto",
    open_world: bool | None = None,
    train_concepts: str = "auto",
    compare_train_concepts: bool = True,
    ferl_settings: str = "concepts",
    coverage: float | None = 0.9,
    max_set_size: int = MAX_SET_SIZE,
) -> dict:
    """Run the job; see the module docstring.

    Parameters
    ----------
    concepts : path-like
        A ``concepts/`` folder, or a run directory holding one.
    out : path-like
        Output folder (the run directory). The first ``config.yaml`` in ``out``, ``concepts`` or
        its parent, when present, names the dataset and says whether the run is open-world.
    heads : sequence of str
        Registry names (:data:`cbm.heads.HEADS`); ``lr-restricted`` brings ``ferl-deep`` along,
        ``cart-compact`` brings ``ferl-compact``.
    seed : int
        Seed of every head and of the answered copy (same seed, same result).
    dataset : {"auto", "cub20", "cub200", "awa2", "none"}
        Which of the paper's Table 4 values to print beside ours; "auto" reads ``config.yaml``.
    open_world : bool or None
        Allow test classes unseen in train (not in the metrics); None reads ``config.yaml``.
    train_concepts : {"auto", "cross-fitted", "in-sample", "independent"}
        Training vectors of the saved heads and of the main table (:mod:`cbm.heads.train_concepts`);
        ``auto``: cross-fitted when ``concepts/train_crossfit.npz`` exists, else in-sample.
    compare_train_concepts : bool
        Also fit every head on the other sources (metrics only), for "heads by training concepts".
    ferl_settings : {"concepts", "learner"}
        The FERL heads' learner settings (:data:`cbm.heads.models.CONCEPT_SETTINGS`).
    coverage : float in (0, 1) or None
        Target coverage of the FERL heads' credal sets, calibrated on val and widened with the
        shift score (`cbm.heads.operating`), and of every head's split-conformal baseline sets;
        None keeps the paper's interval-dominance sets alone (and no operating point).
    max_set_size : int >= 1
        The widest set the FERL heads answer with; wider ones abstain (`cbm.heads.operating`).

    Returns
    -------
    dict
        The ``fit_head`` entry written to ``metrics.json``.

    Raises
    ------
    FileNotFoundError
        A concept table is missing.
    ValueError
        Invalid tables (split, row and concept named), a table without rows (its file named), names
        that differ between tables, test classes unseen in train outside an open-world run, an
        unknown head, ``ferl_settings`` or ``seed``, a ``metrics.json`` or ``config.yaml`` that
        cannot be read (checked before anything is fitted).
    ferl.io.persist.FolderBusyError
        Another process is writing ``out``.
    OSError
        ``out`` cannot be written (read-only, full): the previous results stay unchanged.
    """
    out = Path(out)
    if not Path(concepts).is_dir():
        raise FileNotFoundError(f"{concepts} is not a folder: give a run directory made by train-detector "
                                "(holding concepts/{train,val,test}.npz) or a concepts/ folder")
    names = _resolve_heads(list(heads))
    if ferl_settings not in FERL_SETTINGS:
        raise ValueError(f"ferl_settings must be one of {list(FERL_SETTINGS)}, got {ferl_settings!r}")
    if coverage is not None and (isinstance(coverage, bool) or not isinstance(coverage, (int, float))
                                 or not 0.0 < coverage < 1.0):
        raise ValueError(f"coverage must be a number in (0, 1) or null, got {coverage!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**32:
        raise ValueError(f"seed must be an integer in [0, 2**32 - 1], got {seed!r}")  # before any fit
    with folder_lock(out):
        metrics_path = out / "metrics.json"
        doc = read_metrics(metrics_path)
        tables = load_concept_tables(concepts)
        for split, use in _SPLIT_USES.items():
            if tables[split].n_samples == 0:
                raise ValueError(f"concepts/{split}.npz of {concepts} has no rows: {use} on the {split} "
                                 f"split; give the {split} split samples and run train-detector again")
        train, test = tables["train"], tables["test"]
        concept_names, class_names = train.concept_names, np.asarray(train.class_names)
        data_cfg = read_run_config(out, Path(concepts), Path(concepts).parent)
        if open_world is None:
            open_world = data_cfg.get("fold") is not None
        seen = np.isin(test.y, np.unique(train.y))
        if not seen.all():
            unseen = sorted({str(class_names[c]) for c in test.y[~seen]})
            if not open_world:
                raise ValueError(
                    f"the test split has {int((~seen).sum())} rows of {len(unseen)} class(es) never seen in "
                    f"train: {unseen[:20]}; this is only valid for an open-world run (--open-world true)"
                )
            log.info("open-world run: %d test rows of unseen classes left out", int((~seen).sum()))
        _warn_coverage(coverage, int(np.isin(tables["val"].y, np.unique(train.y)).sum()))

        with phase("fitting the calibrator and the heads", f"{out} is unchanged: its calibration.json, "
                   "heads, metrics.json and tables are replaced together, once every head is fitted"):
            calibrator = ConceptCalibrator().fit(tables["val"].probs, tables["val"].concept_labels,
                                                 concept_names)
            inputs = {
                "raw": {s: t.probs for s, t in tables.items()},
                "calibrated": {s: calibrator.transform(t.probs, t.concept_names) for s, t in tables.items()},
            }
            y_train, y_test = class_names[train.y], class_names[test.y[seen]]
            y_val = class_names[tables["val"].y]
            crossfit = crossfit_table(concepts, train)
            main = resolve_train_concepts(train_concepts, crossfit is not None)
            sources = [main] + [s for s in TRAIN_CONCEPTS if compare_train_concepts and s != main
                                and (s != "cross-fitted" or crossfit is not None)]
            X_val = {kind: inputs[kind]["val"] for kind in INPUTS}
            val = tables["val"]
            X_sets = {"raw": val.probs, "calibrated": crossfit_calibrate(val.probs, val.concept_labels,
                                                                         concept_names, seed=seed)}
            X_test = {kind: inputs[kind]["test"][seen] for kind in INPUTS}
            shift = shift_inputs(concepts, tables, class_names, seen, seed, concept_names)
            compared, fitted = {}, {}
            for source in sources:
                compared[source], heads_of = _fit_heads(
                    names, train_inputs(source, train, crossfit, calibrator), X_val, X_test, y_train, y_val,
                    y_test, concept_names, seed, source, ferl_settings, coverage, X_sets, shift, max_set_size,
                    None if source == "independent" else train)
                if source == main:
                    fitted = heads_of
            results = compared[main]
            _say_abstention(results)

            entry = {
                "concepts": str(concepts), "seed": seed, "run_dataset": data_cfg.get("dataset"),
                "paper_dataset": paper_dataset(dataset, data_cfg, len(class_names)),
                "open_world": bool(open_world), "n_concepts": len(concept_names),
                "n_classes": len(class_names), "n_train_classes": len(set(train.y.tolist())),
                "n": {**{s: t.n_samples for s, t in tables.items()},
                      "test_unseen_class_rows": int((~seen).sum())},
                "calibration": {**_calibration_summary(tables, inputs["calibrated"]),
                                "map_kinds": dict(Counter(calibrator.kinds_)),
                                "constant_maps": calibrator.constant_maps()},
                "heads": results, "train_concepts": main, "ferl_settings": ferl_settings,
                "coverage": coverage, "max_set_size": max_set_size,
                "shift_calibration": None if shift.X is None else {"table": f"concepts/{SHIFT_SPLIT}.npz",
                                                                   "n": int(len(shift.y))},
                "train_concepts_compared": {
                    src: {h: {k: {m: r[h][k][m] for m in ("accuracy", "aurc", "ece")} for k in INPUTS}
                          for h in names}
                    for src, r in compared.items()},
            }
            doc["fit_head"] = entry
            with StepWriter(out) as step:
                calibrator.save(step.path(out / "calibration.json"))
                for (name, kind), head in fitted.items():
                    note = f"<!-- inputs: {kind} concept probabilities, {main} train concepts -->\n"
                    step.folder(out / "head" / name / kind, partial(head.save, rules_note=note))
                step.write_text(metrics_path, json.dumps(doc, indent=1) + "\n")
                step.write_text(out / "tables" / "heads.md", heads_markdown(entry))
                step.write_text(out / "tables" / "heads.csv", heads_frame(entry).to_csv(index=False))
    return entry


def fit_head_parser() -> ArgumentParser:
    """The ``fit-head`` argument parser (jsonargparse; ``--config configs/head/default.yaml``)."""
    parser = ArgumentParser(prog="fit-head", description=(
        "Fit per-concept calibration on val and every head on train (raw and calibrated concepts), "
        "evaluate on test, write models, rules, metrics.json and tables/heads.md."))
    parser.add_argument("--config", action=ActionConfigFile, help="YAML config file")
    parser.add_argument("--run", type=str | None, default=None,
                        help="run directory holding concepts/; outputs are written there")
    parser.add_argument("--concepts", type=str | None, default=None,
                        help="concept tables made elsewhere (a concepts/ folder); needs --out")
    parser.add_argument("--out", type=str | None, default=None, help="output folder (default: --run)")
    parser.add_argument("--heads", type=list[str] | str, default=list(HEADS),
                        help=f"heads to fit, a list or comma-separated: {', '.join(HEADS)}")
    parser.add_argument("--seed", type=int, default=0, help="seed of every head")
    parser.add_argument("--dataset", type=Literal["auto", "cub20", "cub200", "awa2", "none"], default="auto",
                        help="paper values to print beside ours ('auto': from the run's config.yaml)")
    parser.add_argument("--open-world", type=bool | None, default=None,
                        help="allow test classes unseen in train (default: the run config's data.fold)")
    parser.add_argument("--train-concepts", type=Literal["auto", *TRAIN_CONCEPTS], default="auto",
                        help="training vectors of the heads: 'auto' = cross-fitted when the run has "
                             "concepts/train_crossfit.npz, else in-sample; 'independent' = true concepts")
    parser.add_argument("--compare-train-concepts", type=bool, default=True,
                        help="also fit the heads on the other training-concept sources (reported only)")
    parser.add_argument("--ferl-settings", type=Literal["concepts", "learner"], default="concepts",
                        help="FERL heads: the concept-vector settings over the preset, or the preset alone")
    parser.add_argument("--max-set-size", type=int, default=MAX_SET_SIZE,
                        help="the widest credal set the FERL heads answer with; a wider one abstains")
    parser.add_argument("--coverage", type=float | None, default=0.9,
                        help="target coverage of the FERL heads' credal sets (calibrated on val) and of "
                             "the split-conformal baseline sets; null: the paper's interval-dominance sets")
    add_threads_argument(parser)
    return parser


def fit_head_main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``fit-head``; prints the Table-4-style table.

    Bad input, file-system errors and an output folder that another process is writing end the
    program with one ``fit-head: error: <message>`` line (exit status 1); SIGTERM / SIGINT with
    one line saying what was kept (:func:`cbm.jobs.console_main`).
    """
    cfg = fit_head_parser().parse_args(argv)
    heads = cfg.heads.split(",") if isinstance(cfg.heads, str) else list(cfg.heads)
    if (cfg.run is None) == (cfg.concepts is None):
        raise SystemExit("fit-head: error: give exactly one of --run <dir> or --concepts <dir>")
    if cfg.concepts is not None and cfg.out is None:
        raise SystemExit("fit-head: error: --concepts needs --out <dir>")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    out = Path(cfg.out or cfg.run)

    def job():
        set_threads(cfg.threads)
        return fit_head(cfg.run or cfg.concepts, out, heads=[h.strip() for h in heads], seed=cfg.seed,
                        dataset=cfg.dataset, open_world=cfg.open_world, train_concepts=cfg.train_concepts,
                        compare_train_concepts=cfg.compare_train_concepts, ferl_settings=cfg.ferl_settings,
                        coverage=cfg.coverage, max_set_size=cfg.max_set_size)

    console_main("fit-head", job)
    print((out / "tables" / "heads.md").read_text())
