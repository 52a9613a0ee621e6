"""The detector-class-disjoint open-world protocol (paper §5.2 "OOD Detection", Table 5).

For every seed and every class-disjoint fold (:func:`cbm.data.folds.class_disjoint_folds`):

1. the fold's classes are held out **before** the concept detector is trained
   (:func:`cbm.detector.train.train_detector` on the retained classes' train split, checkpoint chosen on
   their val split); the fold's run directory is an ordinary train-detector run;
2. a :class:`~cbm.concepts.calibration.ConceptCalibrator` is fitted on the retained **val** concept
   probabilities, and every vector below is calibrated with it (the val rows themselves out of
   sample, by maps fitted on the other half of val, as ``fit-head`` calibrates them);
3. the FERL heads (:mod:`cbm.heads`) and the dedicated detectors
   (:data:`ferl.benchmarks.ood.DETECTORS`: class-conditional Mahalanobis with a shared Ledoit-Wolf
   covariance, kNN distance with k = 5, Isolation Forest) are fitted on the retained **train**
   vectors: the detector's cross-fitted (out-of-fold) train concepts when the detector config sets
   ``crossfit_folds`` (``EvalSettings.train_concepts``, :mod:`cbm.heads.train_concepts`), else its
   in-sample ones;
4. each score's threshold accepts ``accept`` (95 %) of the retained **val** vectors
   (:func:`ferl.metrics.fit_acceptance_threshold`);
5. scores of retained-class **test** images (in-distribution) and held-out-class test images
   (OOD, the positive class) give AUROC, AUPR-Out, FPR95 and the rejection rate
   (:mod:`ferl.metrics`), and FERL's top-k anomalous attributes of each held-out image are checked
   against the concepts in which its class profile differs from the nearest retained class
   (:mod:`cbm.openworld.metrics`).

:func:`evaluate_fold` runs steps 2-5 on a fold's concept tables, :func:`run_fold` the whole fold
with its files. Every step records the classes it used and raises ``ValueError`` if a held-out
class reached it (``result["steps"]``). A fold whose ``result.json`` exists is skipped, and a
fold whose detector was already trained with the same configuration is re-evaluated without
retraining, unless ``overwrite``.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from cbm.concepts.calibration import ConceptCalibrator, crossfit_calibrate
from cbm.data import ConceptDataModule
from cbm.data.concept_tables import SHIFT_SPLIT, ConceptTable, load_concept_tables
from cbm.data.folds import ClassFold
from cbm.data.tables import SampleTable
from cbm.detector.cli import detector_parser
from cbm.detector.crossfit import CROSSFIT_SPLIT
from cbm.detector.train import train_detector
from cbm.heads import make_head
from cbm.heads.interventions import training_rows
from cbm.heads.operating import Decisions, decide, fit_operating_point
from cbm.heads.train_concepts import resolve_train_concepts
from cbm.openworld.fold_heads import example, head_outputs, head_summary, shifted_rows
from cbm.openworld.metrics import (
    anomaly_ground_truth,
    detection_at_rate,
    image_anomaly_ground_truth,
)
from cbm.openworld.settings import EvalSettings, check_keep_checkpoints, prune_checkpoints
from ferl import metrics as M
from ferl.benchmarks.ood import DETECTORS, ferl_score
from ferl.io.persist import StepWriter, atomic_write_bytes, folder_lock

__all__ = [
    "PARTS",
    "RESULT_VERSION",
    "FoldEvaluation",
    "evaluate_fold",
    "head_outputs",
    "run_fold",
]

#: Layout version of ``result.json``: a fold with another version is re-evaluated (detector reused), so
#: a change to what a fold computes (the heads' settings, the scores, the operating point) bumps it and
#: stale folds are never read back as current.
RESULT_VERSION = 19
#: Concept tables exported per fold: retained train/val/test and the held-out classes' test images.
PARTS = ("train", "val", "test", "novel")


def _record(steps: dict, step: str, y: np.ndarray, allowed: Sequence[int], fold: ClassFold) -> None:
    """Record the classes a step used; raise ValueError when any lies outside ``allowed``."""
    classes = np.unique(np.asarray(y)).astype(int).tolist()
    stray = sorted(set(classes) - set(allowed))
    if stray:
        raise ValueError(f"fold {fold.index}: class(es) {stray} reached step {step!r}, which may only "
                         f"use classes {sorted(allowed)}")
    steps[step] = {"n": int(np.asarray(y).size), "classes": classes}


def _same_yaml(path: Path, text: str) -> bool:
    return path.is_file() and yaml.safe_load(path.read_text()) == yaml.safe_load(text)


def _train_or_reuse(table: SampleTable, fold: ClassFold, fold_dir: Path, det: dict,
                    overwrite: bool, steps: dict, keep_checkpoints: str) -> dict:
    """Train the fold's detector (or reuse one trained with the same config); return its summary."""
    parser = detector_parser()
    cfg = parser.parse_object(det)
    text = parser.dump(cfg)
    dm = ConceptDataModule(**cfg.data.as_dict(), table=table)
    dm.setup("fit")
    _record(steps, "detector_train", dm.datasets["train"].targets, fold.retained, fold)
    _record(steps, "detector_checkpoint_selection", dm.datasets["val"].targets, fold.retained, fold)
    parts = [*PARTS, CROSSFIT_SPLIT] if cfg.crossfit_folds else list(PARTS)
    tables_there = all((fold_dir / "concepts" / f"{p}.npz").is_file() for p in parts)
    metrics_file = fold_dir / "detector" / "metrics.json"
    if not overwrite and tables_there and metrics_file.is_file():
        if not _same_yaml(fold_dir / "config.yaml", text):
            raise ValueError(f"{fold_dir} holds a detector trained with another configuration; pass "
                             "--overwrite or choose another --out")
        status = "reused"
    else:
        if fold_dir.exists():
            shutil.rmtree(fold_dir)
        train_detector(dm, run_dir=fold_dir, model=cfg.model.as_dict(), trainer=cfg.trainer.as_dict(),
                       seed=cfg.seed, logger=cfg.logger, monitor=cfg.monitor, pos_weight=cfg.pos_weight,
                       export_splits=list(PARTS), crossfit_folds=cfg.crossfit_folds,
                       feature_cache=cfg.feature_cache, config_text=text)
        status = "trained"
    summary = json.loads(metrics_file.read_text())
    return {"status": status, "epochs": summary["epochs"], "fit_seconds": summary["fit_seconds"],
            "max_epochs": cfg.trainer.max_epochs, "concept_metrics": summary["splits"],
            "checkpoints": prune_checkpoints(fold_dir, keep_checkpoints)}


def _save_scores(path: Path, names: list[str], scores: dict[str, dict[str, np.ndarray]],
                 tables: dict, outputs: dict[str, np.ndarray]) -> None:
    arrays = {f"scores_{p}": np.stack([scores[d][p] for d in names], axis=1)
              for p in ("val", "test", "novel")}
    arrays.update(detectors=np.asarray(names), y_test=tables["test"].y, y_novel=tables["novel"].y,
                  ids_novel=np.asarray(tables["novel"].sample_ids))
    arrays.update({f"main_{k}": v for k, v in outputs.items()})
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    atomic_write_bytes(path, buf.getvalue())


@dataclass
class FoldEvaluation:
    """What :func:`evaluate_fold` computed.

    Attributes
    ----------
    result : dict
        JSON-able: ``ood`` (per score: :func:`ferl.metrics.ood_summary`), ``heads`` (per FERL head: its
        ``ood_kind``, retained accuracy, abstention, size, ``naming``: precision@k, the same with the
        held-out images' true concepts in place of the detector's (``true_concepts_precision@k``:
        detector errors removed), ``chance`` = |truth| / concepts, and ``image_precision@k`` /
        ``image_chance`` against each image's own concepts
        (:func:`~cbm.openworld.metrics.image_anomaly_ground_truth`)), ``examples``, ``ground_truth``
        and ``steps`` (classes used by every step).
    scores : dict
        Score name -> part (``val`` / ``test`` / ``novel``) -> ndarray of shape (n_part,).
    calibrator : ConceptCalibrator
        Fitted on the retained val table.
    outputs : dict of str to ndarray
        The first head's outputs on the test and novel parts (:func:`head_outputs`).
    """

    result: dict
    scores: dict[str, dict[str, np.ndarray]]
    calibrator: ConceptCalibrator
    outputs: dict[str, np.ndarray]


def evaluate_fold(tables: Mapping[str, ConceptTable], class_concepts: np.ndarray, fold: ClassFold, seed: int,
                  settings: EvalSettings, *, examples: bool = True) -> FoldEvaluation:
    """Steps 2-5 of the protocol on one fold's concept tables (calibration, heads, baselines,
    thresholds, metrics, attribute naming, examples).

    Parameters
    ----------
    tables : mapping of str to ConceptTable
        ``train``, ``val``, ``test`` (retained classes) and ``novel`` (held-out classes) detector
        outputs, e.g. ``load_concept_tables(fold_dir, splits=PARTS)``; optionally
        ``train_crossfit`` (cross-fitted train concepts, same rows as ``train``).
    class_concepts : ndarray of shape (n_classes, n_concepts), {0, 1}
        Class profiles for :func:`anomaly_ground_truth`.
    fold : ClassFold
    seed : int
        Seed of the heads and of Isolation Forest.
    settings : EvalSettings
    examples : bool
        Explain ``settings.examples_per_fold`` held-out images.

    Returns
    -------
    FoldEvaluation

    Raises
    ------
    ValueError
        A table holds a class it may not hold (a held-out class among train/val/test, a retained
        one among novel), or invalid concept vectors.
    """
    steps: dict = {}
    for part in ("train", "val", "test"):
        _record(steps, part, tables[part].y, fold.retained, fold)
    _record(steps, "novel", tables["novel"].y, fold.held_out, fold)
    names, concept_names = list(tables["train"].class_names), tables["train"].concept_names
    cal = ConceptCalibrator().fit(tables["val"].probs, tables["val"].concept_labels, concept_names)
    _record(steps, "calibration", tables["val"].y, fold.retained, fold)
    X = {p: cal.transform(tables[p].probs, concept_names) for p in PARTS}
    # val's own rows calibrated in-sample are cleaner than test's, so a threshold fitted on them flags
    # more retained test images than it should (docs/results/openworld.md); fit-head calibrates them so too
    X["val"] = crossfit_calibrate(tables["val"].probs, tables["val"].concept_labels, concept_names, seed=seed)
    source = resolve_train_concepts(settings.train_concepts, CROSSFIT_SPLIT in tables)
    if source == "cross-fitted":
        if not np.array_equal(tables[CROSSFIT_SPLIT].sample_ids, tables["train"].sample_ids):
            raise ValueError(f"fold {fold.index}: the cross-fitted train table holds other rows than train")
        _record(steps, CROSSFIT_SPLIT, tables[CROSSFIT_SPLIT].y, fold.retained, fold)
        X["train"] = cal.transform(tables[CROSSFIT_SPLIT].probs, concept_names)
    y_train, label_of = tables["train"].y, np.asarray(names)
    truth = anomaly_ground_truth(class_concepts, fold.held_out, fold.retained)
    gt = np.stack([truth[c][1] for c in tables["novel"].y])
    gt_image = image_anomaly_ground_truth(tables["novel"].concept_labels, class_concepts, fold.retained)
    k_max = max(settings.top_k)
    scores: dict[str, dict[str, np.ndarray]] = {}
    heads_out, fitted = {}, {}
    shifted = shifted_rows(tables, X, concept_names, label_of, seed)
    decisions: dict[str, dict[str, Decisions]] = {}
    for h in settings.heads:
        head = make_head(h, seed, settings=settings.ferl_settings)
        X_fit, y_fit = training_rows(head, X["train"], label_of[y_train], tables["train"], seed)
        head = fitted[h] = head.fit(X_fit, y_fit, concept_names)
        _record(steps, f"head_fit:{h}", y_train, fold.retained, fold)
        y_val = label_of[tables["val"].y]
        head.fit_sets(X["val"], y_val, settings.coverage)  # the operating point fit-head fits
        head.fit_novelty(X["val"], 1.0 - settings.accept)
        head.fit_ood_threshold(X["val"], settings.accept)
        fit_operating_point(head, X["val"], y_val, tables["val"].feature_score, shifted, settings.coverage,
                            settings.max_set_size)
        _record(steps, f"operating_point:{h}", tables["val"].y, fold.retained, fold)
        for kind in settings.ferl_kinds:
            scores[f"{h}:{kind}"] = {p: ferl_score(head.model_, X[p], kind) for p in ("val", "test", "novel")}
        decisions[h] = {p: decide(head, X[p], tables[p].feature_score) for p in ("test", "novel")}
        heads_out[h] = head_summary(head, X, tables, label_of, gt, gt_image, settings.top_k, decisions[h])
    for b in settings.baselines:
        det = DETECTORS[b][1](seed).fit(X["train"], y_train)
        _record(steps, f"baseline_fit:{b}", y_train, fold.retained, fold)
        scores[b] = {p: det.score(X[p]) for p in ("val", "test", "novel")}
    _record(steps, "threshold", tables["val"].y, fold.retained, fold)
    for m in heads_out.values():  # the baselines flag as many retained images as the product catches
        m["baselines_at_operating_point"] = detection_at_rate(scores, settings.baselines, m["caught_test"])
    ood = {d: M.ood_summary(s["val"], s["test"], s["novel"], settings.accept) for d, s in scores.items()}
    explained = []
    if examples:
        h0, novel = settings.heads[0], tables["novel"]  # the head's own kind where it was scored
        kind0 = next(k for k in (fitted[h0].ood_kind, *settings.ferl_kinds) if f"{h0}:{k}" in scores)
        for c in fold.held_out[: settings.examples_per_fold]:
            i = int(np.flatnonzero(novel.y == c)[0])
            feature = None if novel.feature_score is None else float(novel.feature_score[i])
            explained.append(example(fitted[h0], X["novel"][i], feature, str(novel.sample_ids[i]), c, names,
                                      truth, float(scores[f"{h0}:{kind0}"]["novel"][i]),
                                      ood[f"{h0}:{kind0}"]["threshold"], kind0, k_max))
    result = {
        "retained": list(fold.retained), "held_out": list(fold.held_out),
        "held_out_names": [names[c] for c in fold.held_out], "n": {p: tables[p].n_samples for p in PARTS},
        "steps": steps, "train_concepts": source, "ood": ood, "heads": heads_out, "examples": explained,
        "ground_truth": {names[c]: {"nearest_retained": [names[n] for n in near],
                                    "concepts": [concept_names[j] for j in np.flatnonzero(mask)]}
                         for c, (near, mask) in truth.items()},
    }
    h0 = settings.heads[0]
    return FoldEvaluation(result, scores, cal, head_outputs(decisions[h0], fitted[h0].classes_))


def run_fold(table: SampleTable, fold: ClassFold, seed: int, fold_dir: str | os.PathLike, detector: dict,
             settings: EvalSettings, *, overwrite: bool = False, examples: bool = True,
             keep_checkpoints: str = "none") -> dict:
    """Run one (seed, fold) of the protocol: train (or reuse) the fold's detector, then
    :func:`evaluate_fold`; write ``calibration.json``, ``scores.npz`` and ``result.json`` there.

    Parameters
    ----------
    table : SampleTable
        The loaded data set (its class-level ``class_concepts`` give the attribute ground truth).
    fold : ClassFold
    seed : int
        Seed of the detector, the heads and Isolation Forest.
    fold_dir : path-like
        The fold's run directory (a train-detector run plus this fold's results).
    detector : dict
        A complete train-detector configuration (``data.fold`` = ``fold.index``, ``run_dir`` =
        ``fold_dir``, ``seed``).
    settings : EvalSettings
    overwrite : bool
        Retrain and re-evaluate even if results exist.
    examples : bool
        Explain ``settings.examples_per_fold`` held-out images.
    keep_checkpoints : {"none", "best", "all"}
        Detector checkpoints kept once the fold's concept tables are exported (a fold's two
        checkpoints are the detector's full weights, twice: sizes in docs/results/openworld.md);
        also applied to a finished fold that is read back. What is left is recorded in
        ``detector.checkpoints``; deleted checkpoints cannot come back (retrain with
        ``overwrite``).

    Returns
    -------
    dict
        The fold result: :attr:`FoldEvaluation.result` plus ``seed``, ``fold``, ``detector``
        (status, epochs, concept metrics), ``seconds`` and ``status`` (``trained``, ``reused``, or
        ``done`` for a fold read back from an earlier run).

    Raises
    ------
    ValueError
        A held-out class reached a fitting step, a fold directory trained with another config, or
        an unknown ``keep_checkpoints``.
    """
    check_keep_checkpoints(keep_checkpoints)
    fold_dir = Path(fold_dir)
    with folder_lock(fold_dir):  # first finish the files of a run killed while writing them
        pass
    result_file = fold_dir / "result.json"
    wanted = {"result_version": RESULT_VERSION, "settings": settings.to_dict(), "detector_config": detector}
    if not overwrite and result_file.is_file():
        done = json.loads(result_file.read_text())
        if all(done.get(k) == v for k, v in wanted.items()):
            done["detector"]["checkpoints"] = prune_checkpoints(fold_dir, keep_checkpoints)
            return {**done, "status": "done"}
    start = time.perf_counter()
    steps: dict = {}
    det_info = _train_or_reuse(table, fold, fold_dir, detector, overwrite, steps, keep_checkpoints)
    extra = [s for s in (CROSSFIT_SPLIT, SHIFT_SPLIT) if (fold_dir / "concepts" / f"{s}.npz").is_file()]
    tables = load_concept_tables(fold_dir, splits=[*PARTS, *extra])
    ev = evaluate_fold(tables, table.class_concepts, fold, seed, settings, examples=examples)
    result = {"seed": seed, "fold": fold.index, **ev.result, "steps": steps | ev.result["steps"],
              "detector": det_info, "scores_file": "scores.npz",
              "seconds": round(time.perf_counter() - start, 2), **wanted}
    with StepWriter(fold_dir) as step:  # calibration, scores and result.json are replaced together
        ev.calibrator.save(step.path(fold_dir / "calibration.json"))
        _save_scores(step.path(fold_dir / "scores.npz"), settings.detectors, ev.scores, tables,
                     ev.outputs)
        step.write_text(result_file, json.dumps(result, indent=1) + "\n")
    return {**result, "status": det_info["status"]}
