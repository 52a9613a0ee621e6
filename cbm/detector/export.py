"""The concept-table export that ends a detector run, written as one step.

Every split's concept probabilities are predicted in memory first; then ``concepts/{split}.npz``
and ``detector/metrics.json`` are replaced together (:class:`ferl.persist.StepWriter`), so a run
stopped during the export keeps its previous tables and metrics, all of one export.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer
from torch.utils.data import DataLoader

from cbm.data.concept_tables import ConceptTable
from cbm.detector.module import concept_metrics
from ferl.persist import StepWriter

__all__ = ["export_concept_tables"]


def export_concept_tables(
    run_dir: Path,
    model: LightningModule,
    loaders: Mapping[str, DataLoader],
    class_names: Sequence[str],
    *,
    accelerator: str,
    precision: str,
    summary: Mapping[str, Any],
    concept_groups: Mapping[str, Sequence[str]] | None = None,
) -> tuple[dict[str, Path], dict[str, dict]]:
    """Predict every split with ``model`` and write the tables and ``detector/metrics.json`` together.

    Parameters
    ----------
    run_dir : Path
        The run directory (its write lock is taken for the commit).
    model : ConceptDetector
        The model to export (the best checkpoint's, or the final weights).
    loaders : mapping of str to DataLoader
        Evaluation loaders whose ``.dataset`` has ``concept_labels``, ``targets`` and
        ``sample_ids`` in loader order (:meth:`cbm.data.ConceptDataModule.eval_dataloader`).
    class_names : sequence of str
    accelerator, precision : str
        Of the single-device predictor.
    summary : mapping
        Fields of ``detector/metrics.json`` besides ``splits`` (which this function adds: the
        :func:`~cbm.detector.concept_metrics` and size of every split, NaN written as null).
    concept_groups : mapping of str to sequence of str, optional
        The data set's concept groups (group -> concept names), saved in each table for
        interventions (:class:`cbm.concepts.ConceptGroups`).

    Returns
    -------
    tables : dict of str to Path
        Split name -> its table file.
    metrics : dict of str to dict
        Split name -> concept metrics plus ``n``.

    Raises
    ------
    SystemExit
        SIGTERM arrived during a prediction while Lightning's handler was the only one (a caller
        without a handler of its own: Lightning would note the signal and finish the export).
    """
    predictor = Trainer(accelerator=accelerator, devices=1, precision=precision, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    tables: dict[str, ConceptTable] = {}
    for split, loader in loaders.items():
        probs = torch.cat(predictor.predict(model, dataloaders=loader)).float().cpu().numpy()
        if predictor.received_sigterm:  # Lightning's handler notes SIGTERM during predict, then goes on
            raise SystemExit(f"interrupted by SIGTERM while exporting the concept tables; the concept tables "
                             f"and detector/metrics.json in {run_dir} are unchanged")
        ds = loader.dataset
        tables[split] = ConceptTable(
            probs=probs, concept_labels=ds.concept_labels, y=ds.targets,
            concept_names=list(model.concept_names), class_names=list(class_names),
            sample_ids=ds.sample_ids, split=split, concept_groups=concept_groups)
    metrics = {split: {**concept_metrics(t.probs, t.concept_labels), "n": t.n_samples}
               for split, t in tables.items()}
    doc = {**summary, "splits": {split: {k: None if v != v else v for k, v in m.items()}  # NaN -> null
                                 for split, m in metrics.items()}}
    paths = {split: run_dir / "concepts" / f"{split}.npz" for split in tables}
    with StepWriter(run_dir) as step:
        for split, table in tables.items():
            table.save(step.path(paths[split]))
        step.write_text(run_dir / "detector" / "metrics.json", json.dumps(doc, indent=2) + "\n")
    return paths, metrics
