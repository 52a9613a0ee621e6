"""Cross-fitted (out-of-fold) concept predictions for the training images.

A detector's concept probabilities on its own training images are cleaner than on any image it
has not seen (a linear probe on 1,280 features reaches train AUROC ≈ 1); a head fitted on them
learns to trust concepts more than test inputs deserve. Cross-fitting (beyond the paper; Koh et
al.'s "sequential" bottleneck uses in-sample predictions) splits the training images into K
class-stratified folds, trains K copies of the detector (same initial weights, same options, each
on K - 1 folds, checkpoint chosen on the same val split) and predicts every training image with the
copy that did not see it. The result is written as ``concepts/train_crossfit.npz`` beside the
in-sample ``concepts/train.npz``; ``fit-head`` and the open-world protocol can fit the heads on it.
Cheap with a frozen backbone (K probes on cached features) or a features data set; with a
fine-tuned image backbone it costs K more trainings.
"""

from __future__ import annotations

import copy
import logging
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from lightning.pytorch import Callback, LightningDataModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from sklearn.model_selection import StratifiedKFold
from torch.utils.data import DataLoader, Subset

from cbm.detector.export import predict, predictor
from cbm.detector.module import ConceptDetector

__all__ = ["CROSSFIT_SPLIT", "crossfit_probs"]

log = logging.getLogger(__name__)

#: Name of the cross-fitted training table (``concepts/<name>.npz``).
CROSSFIT_SPLIT = "train_crossfit"


class _FoldData(LightningDataModule):
    """Training rows ``rows`` of the data module's train split; its val split unchanged."""

    def __init__(self, datamodule: LightningDataModule, rows: np.ndarray, seed: int) -> None:
        super().__init__()
        self.dm, self.rows, self.seed = datamodule, rows, seed

    def train_dataloader(self) -> DataLoader:
        base = self.dm.train_dataloader()
        return DataLoader(Subset(base.dataset, self.rows.tolist()), batch_size=base.batch_size, shuffle=True,
                          num_workers=base.num_workers, generator=torch.Generator().manual_seed(self.seed))

    def val_dataloader(self) -> DataLoader:
        return self.dm.val_dataloader()


def crossfit_probs(initial: ConceptDetector, datamodule: LightningDataModule, *, n_folds: int, seed: int,
                   trainer: Mapping[str, Any], monitor: tuple[str, str], workdir: str | Path,
                   callbacks: Iterable[Callback] = ()) -> np.ndarray:
    """Out-of-fold concept probabilities of the train split, in ``eval_dataloader("train")`` order.

    Parameters
    ----------
    initial : ConceptDetector
        The detector before training (each fold trains a deep copy).
    datamodule : LightningDataModule
        Set up; gives ``train_dataloader()``, ``val_dataloader()`` and ``eval_dataloader("train")``
        (same rows, same order).
    n_folds : int, >= 2
        K, the number of class-stratified folds (``StratifiedKFold(shuffle=True, random_state=seed)``).
    seed : int
    trainer : mapping
        Lightning Trainer options of the main run (one device is used here; no logger).
    monitor : (metric, mode)
        Checkpoint selection on val, as in the main run.
    workdir : path-like
        Where the fold checkpoints live while a fold runs (deleted afterwards).
    callbacks : iterable of Callback
        Added to every fold's trainer (e.g. the per-epoch reseeding).

    Returns
    -------
    probs : ndarray of shape (n_train, n_concepts), float32 in [0, 1]

    Raises
    ------
    ValueError
        ``n_folds < 2``, or fewer training images than folds.
    """
    eval_loader = datamodule.eval_dataloader("train")
    y = np.asarray(eval_loader.dataset.targets)
    if n_folds < 2 or len(y) < n_folds:
        raise ValueError(f"crossfit_folds must be >= 2 and at most the {len(y)} training images, "
                         f"got {n_folds}")
    folds = StratifiedKFold(n_splits=n_folds, shuffle=True, random_state=seed)
    metric, mode = monitor
    options = {**dict(trainer), "devices": 1, "strategy": "auto", "enable_progress_bar": False,
               "enable_model_summary": False}
    out = np.zeros((len(y), len(initial.concept_names)), dtype=np.float32)
    start = time.process_time()
    for j, (fit_rows, held_rows) in enumerate(folds.split(np.zeros(len(y)), y)):
        with tempfile.TemporaryDirectory(dir=workdir, prefix="crossfit-") as tmp:
            ckpt = ModelCheckpoint(dirpath=tmp, filename="best", monitor=metric, mode=mode, save_top_k=1,
                                   enable_version_counter=False)
            fold_trainer = Trainer(**options, logger=False, default_root_dir=tmp,
                                   callbacks=[ckpt, *callbacks])
            fold_trainer.fit(copy.deepcopy(initial), datamodule=_FoldData(datamodule, fit_rows, seed + j))
            model = ConceptDetector.from_checkpoint(ckpt.best_model_path)
            loader = DataLoader(Subset(eval_loader.dataset, held_rows.tolist()),
                                batch_size=eval_loader.batch_size, num_workers=eval_loader.num_workers)
            out[held_rows] = predict(model, loader, predictor(options.get("accelerator", "auto"),
                                                              options.get("precision")))
    log.info("cross-fitted train concepts: %d folds in %.0f s CPU", n_folds, time.process_time() - start)
    return out
