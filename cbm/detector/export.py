"""The concept-table export that ends a detector run, written as one step.

Every split's concept probabilities and backbone features are predicted in memory first (on one
device, :func:`predictor` and :func:`detector_outputs`); the detector's feature typicality
(`cbm.detector.typicality`) is fitted on the train split's features and scores every row; then
``concepts/{split}.npz`` (with the cross-fitted train table and the shift-calibration table when
the run has them), ``detector/feature_typicality.npz`` and ``detector/metrics.json`` are replaced
together (:class:`ferl.io.persist.StepWriter`), so a run stopped during the export keeps its
previous tables and metrics, all of one export.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from lightning.pytorch import LightningDataModule, LightningModule, Trainer
from torch.utils.data import DataLoader

from cbm.data.common import check_split_sizes
from cbm.data.concept_tables import ConceptTable
from cbm.detector.metrics import concept_metrics
from cbm.detector.typicality import FEATURE_TYPICALITY_FILE, FeatureTypicality
from ferl.io.persist import StepWriter

__all__ = ["detector_outputs", "export_concept_tables", "export_loaders", "predict", "predictor"]


def predictor(accelerator: str = "auto", precision: str | None = "32-true") -> Trainer:
    """A quiet one-device Lightning Trainer for prediction (no logger, checkpoints or bars)."""
    return Trainer(accelerator=accelerator, devices=1, precision=precision, logger=False,
                   enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)


def predict(model: LightningModule, loader: DataLoader, trainer: Trainer,
            doing: str = "predicting concept probabilities") -> np.ndarray:
    """``model.predict_step`` outputs over ``loader``, concatenated: float32 ndarray (n, ...);
    ``doing`` names the work in the message of an interrupted prediction.

    Raises
    ------
    SystemExit
        SIGTERM arrived during the prediction while Lightning's handler was the only one (a caller
        without a handler of its own: Lightning would note the signal and go on).
    """
    out = torch.cat(trainer.predict(model, dataloaders=loader)).float().cpu().numpy()
    if trainer.received_sigterm:  # Lightning's handler notes SIGTERM during predict, then goes on
        raise SystemExit(f"interrupted by SIGTERM while {doing}")
    return out


class _Outputs(LightningModule):
    """Prediction wrapper: inputs -> ``[features | concept probabilities]`` of a detector."""

    def __init__(self, detector: LightningModule) -> None:
        super().__init__()
        self.detector = detector

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, det = batch[0], self.detector
        if det.frozen and x.ndim == 2:  # cached backbone features stand in for images
            features = x
        elif det.hparams.input_kind == "image":
            features = det.features(x)
        else:
            features = det.backbone(x)
        return torch.cat([features.float(), torch.sigmoid(det.head(features).float())], dim=1)


def detector_outputs(detector: LightningModule, loader: DataLoader, *, accelerator: str = "auto",
                     precision: str | None = "32-true",
                     doing: str = "predicting concept probabilities") -> tuple[np.ndarray, np.ndarray]:
    """Features and concept probabilities of every row of ``loader``, in its order.

    Parameters
    ----------
    detector : ConceptDetector
    loader : DataLoader
        Yields ``(input, concepts, class)`` batches: images, feature vectors, or cached backbone
        features of a frozen backbone.
    accelerator, precision : str
        Of the one-device Lightning predictor (`predictor`).
    doing : str
        The work, named in the message of an interrupted prediction.

    Returns
    -------
    features : ndarray of shape (n, width), float32
        What the concept layer reads (the backbone's output; the MLP's last hidden layer in
        features mode).
    probs : ndarray of shape (n, k), float32 in [0, 1]
    """
    out = predict(_Outputs(detector), loader, predictor(accelerator, precision), doing)
    k = len(detector.concept_names)
    return out[:, :-k], out[:, -k:]


def export_loaders(datamodule: LightningDataModule, splits: Sequence[str]) -> dict[str, DataLoader]:
    """Evaluation loaders (eval transform, table order) of the splits to export; checked early.

    Uses :meth:`cbm.data.ConceptDataModule.eval_dataloader`, whose ``.dataset`` carries the
    ``sample_ids``, ``targets`` and ``concept_labels`` of the split in loader order.

    Raises
    ------
    ValueError
        A split without samples, or a training split of fewer than two
        (:func:`cbm.data.common.check_split_sizes`, which ``python -m cbm.data.validate`` shares).
    """
    loaders = {split: datamodule.eval_dataloader(split) for split in splits}
    check_split_sizes({split: len(loader.dataset) for split, loader in loaders.items()}, splits)
    return loaders


def export_concept_tables(
    run_dir: Path,
    model: LightningModule,
    loaders: Mapping[str, DataLoader],
    class_names: Sequence[str],
    *,
    accelerator: str,
    precision: str | None,
    summary: Mapping[str, Any],
    concept_groups: Mapping[str, Sequence[int]] | Sequence[str] | None = None,
    predicted: Mapping[str, tuple[np.ndarray, Any]] | None = None,
    shift: Callable[[FeatureTypicality], ConceptTable | None] | None = None,
) -> tuple[dict[str, Path], dict[str, dict]]:
    """Predict every split with ``model`` and write the tables, the feature typicality and
    ``detector/metrics.json`` together.

    Parameters
    ----------
    run_dir : Path
        The run directory (its write lock is taken for the commit).
    model : ConceptDetector
        The model to export (the best checkpoint's, or the final weights).
    loaders : mapping of str to DataLoader
        Evaluation loaders whose ``.dataset`` has ``concept_labels``, ``targets`` and
        ``sample_ids`` in loader order (:func:`export_loaders`).
    class_names : sequence of str
    accelerator, precision : str
        Of the single-device predictor.
    summary : mapping
        Fields of ``detector/metrics.json`` besides ``splits`` (which this function adds: the
        :func:`~cbm.detector.concept_metrics` and size of every split, NaN written as null).
    concept_groups : mapping or sequence, optional
        The data set's concept groups (``{group: [concept indices]}`` or one name per concept),
        saved in each table for interventions (:class:`cbm.concepts.ConceptGroups`).
    predicted : mapping of str to (ndarray, dataset), optional
        Tables predicted elsewhere (the cross-fitted train probabilities, ``train_crossfit``) with
        the dataset whose rows they follow; written in the same step, with the feature scores of
        the exported split of the same rows.
    shift : callable, optional
        ``shift(typicality)`` -> the shift-calibration table (`cbm.detector.shifted.shift_table`)
        or None; written in the same step. Needs ``train`` among the exported splits.

    Returns
    -------
    tables : dict of str to Path
        Split name -> its table file.
    metrics : dict of str to dict
        Split name -> concept metrics plus ``n``.

    Raises
    ------
    SystemExit
        SIGTERM during a prediction (see :func:`predict`); nothing was written then.
    """
    doing = (f"exporting the concept tables; the concept tables and detector/metrics.json in {run_dir} "
             "are unchanged")
    outputs = {split: detector_outputs(model, loader, accelerator=accelerator, precision=precision,
                                       doing=doing) for split, loader in loaders.items()}
    typicality, scores = None, {}
    if "train" in outputs:
        typicality = FeatureTypicality().fit(outputs["train"][0], loaders["train"].dataset.targets)
        scores = {split: typicality.score(features) for split, (features, _) in outputs.items()}
    rows = {split: (probs, loaders[split].dataset) for split, (_, probs) in outputs.items()}
    rows.update(predicted or {})
    ids = {split: "\n".join(ds.sample_ids.tolist()) for split, (_, ds) in rows.items()}
    same = {split: next((s for s in scores if ids[s] == ids[split]), None) for split in rows}
    tables = {split: ConceptTable(
        probs=probs, concept_labels=ds.concept_labels, y=ds.targets,
        concept_names=list(model.concept_names), class_names=list(class_names),
        sample_ids=ds.sample_ids, split=split, concept_groups=concept_groups,
        feature_score=None if same[split] is None else scores[same[split]])
        for split, (probs, ds) in rows.items()}
    extra = None if shift is None or typicality is None else shift(typicality)
    if extra is not None:
        tables[extra.split] = extra
    metrics = {split: {**concept_metrics(t.probs, t.concept_labels), "n": t.n_samples}
               for split, t in tables.items()}
    doc = {**summary, "splits": {split: {k: None if v != v else v for k, v in m.items()}  # NaN -> null
                                 for split, m in metrics.items()}}
    paths = {split: run_dir / "concepts" / f"{split}.npz" for split in tables}
    with StepWriter(run_dir) as step:
        for split, table in tables.items():
            table.save(step.path(paths[split]))
        if typicality is not None:
            typicality.save(step.path(run_dir / FEATURE_TYPICALITY_FILE))
        step.write_text(run_dir / "detector" / "metrics.json", json.dumps(doc, indent=2) + "\n")
    return paths, metrics
