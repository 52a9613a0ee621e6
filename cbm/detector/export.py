"""Concept-table export: a trained detector's concept probabilities per split, on one device."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from lightning.pytorch import LightningDataModule, LightningModule, Trainer
from torch.utils.data import DataLoader

from cbm.data.concept_tables import save_concept_table
from cbm.detector.metrics import concept_metrics

__all__ = ["export_loaders", "predict", "predictor", "write_table"]


def predictor(accelerator: str = "auto", precision: str | None = "32-true") -> Trainer:
    """A quiet one-device Lightning Trainer for prediction (no logger, checkpoints or bars)."""
    return Trainer(accelerator=accelerator, devices=1, precision=precision, logger=False,
                   enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)


def predict(model: LightningModule, loader: DataLoader, trainer: Trainer) -> np.ndarray:
    """``model.predict_step`` outputs over ``loader``, concatenated: float32 ndarray (n, ...)."""
    return torch.cat(trainer.predict(model, dataloaders=loader)).float().cpu().numpy()


def export_loaders(datamodule: LightningDataModule, splits: Sequence[str]) -> dict[str, DataLoader]:
    """Evaluation loaders (eval transform, table order) of the splits to export; checked early.

    Uses :meth:`cbm.data.ConceptDataModule.eval_dataloader`, whose ``.dataset`` carries the
    ``sample_ids``, ``targets`` and ``concept_labels`` of the split in loader order.

    Raises
    ------
    ValueError
        A split without samples.
    """
    loaders = {}
    for split in splits:
        loader = datamodule.eval_dataloader(split)
        if len(loader.dataset) == 0:
            raise ValueError(f"split {split!r} has no samples: remove it from export_splits, or give "
                             "each class more samples (a per-class split of very few samples can be empty)")
        loaders[split] = loader
    return loaders


def write_table(run_dir: str | Path, split: str, probs: np.ndarray, dataset: Any, concept_names: list[str],
                class_names: list[str]) -> tuple[Path, dict[str, float]]:
    """Save ``<run_dir>/concepts/<split>.npz`` for the rows of ``dataset`` (loader order).

    Returns
    -------
    path : Path
    metrics : dict
        :func:`~cbm.detector.metrics.concept_metrics` of the table, plus ``n``.
    """
    path = Path(run_dir) / "concepts" / f"{split}.npz"
    table = save_concept_table(path, probs=probs, concept_labels=dataset.concept_labels, y=dataset.targets,
                               concept_names=concept_names, class_names=class_names,
                               sample_ids=dataset.sample_ids, split=split)
    return path, {**concept_metrics(table.probs, table.concept_labels), "n": table.n_samples}
