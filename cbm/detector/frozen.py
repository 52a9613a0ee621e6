"""Frozen-backbone training: backbone features computed once, cached on disk, served as a data set.

With ``model.freeze_backbone: true`` the backbone never changes, so each image's features are
computed once (evaluation transform: no augmentation) and the concept layer trains on them: a
linear concept probe that takes minutes on a CPU where fine-tuning takes hours. The features of
every image of the data set go to ``<cache_dir>/<key>.npz``; ``key`` is a SHA-256 over the
backbone's weights, the input normalisation, the evaluation transform and the images (ids, paths
with size and modification time, or the image arrays), so the open-world folds of a run, which
share all four, compute them once, and a changed input recomputes them.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from lightning.pytorch import LightningModule

from cbm.data import ConceptDataModule
from cbm.data.tables import FeatureTable, SampleTable
from cbm.detector.export import predict, predictor
from cbm.detector.module import ConceptDetector
from ferl.io.persist import atomic_write_bytes

__all__ = ["backbone_features", "features_key", "frozen_datamodule"]

log = logging.getLogger(__name__)


class _Features(LightningModule):
    """Prediction wrapper: images -> backbone features of a detector."""

    def __init__(self, detector: ConceptDetector) -> None:
        super().__init__()
        self.detector = detector

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.detector.features(batch[0]).float()


def _update_with_images(h: Any, table: SampleTable) -> None:
    h.update("\n".join(table.sample_ids.tolist()).encode())
    paths = getattr(table, "paths", None)
    if paths is not None:
        for p in paths:
            st = os.stat(p)
            h.update(f"{p}\t{st.st_size}\t{st.st_mtime_ns}\n".encode())
    images = getattr(table, "images", None)
    if images is not None:
        h.update(np.ascontiguousarray(images).tobytes())


def features_key(detector: ConceptDetector, datamodule: ConceptDataModule) -> str:
    """The cache key of the backbone features of ``datamodule``'s images (24 hex digits).

    A SHA-256 over the backbone's state dict (names, shapes, bytes), the input normalisation, the
    evaluation transform's description and the images (see the module docstring).
    """
    h = hashlib.sha256()
    for name, value in detector.backbone.state_dict().items():
        t = value.detach().cpu().contiguous()
        h.update(f"{name}{tuple(t.shape)}{t.dtype}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    h.update(repr(detector.input_norm.scale.flatten().tolist() + detector.input_norm.shift.flatten().tolist())
             .encode())
    h.update(repr(datamodule.transform(False)).encode())
    _update_with_images(h, datamodule.table)
    return h.hexdigest()[:24]


def backbone_features(detector: ConceptDetector, datamodule: ConceptDataModule, cache_dir: str | os.PathLike,
                      *, accelerator: str = "auto", precision: str = "32-true") -> np.ndarray:
    """Backbone features of every image of ``datamodule.table``, from the cache or computed once.

    Parameters
    ----------
    detector : ConceptDetector
        An image-mode detector (its backbone and input normalisation are used).
    datamodule : ConceptDataModule
        Gives the table (all rows, table order) and the evaluation transform.
    cache_dir : path-like
        Folder of the cache files (created).
    accelerator, precision : str
        Lightning settings of the extraction (one device).

    Returns
    -------
    features : ndarray of shape (n_samples, backbone.num_features), float32

    Raises
    ------
    ValueError
        A features-mode detector.
    """
    if detector.hparams.input_kind != "image":
        raise ValueError("backbone features need an image-mode detector")
    table = datamodule.table
    path = Path(cache_dir) / f"{features_key(detector, datamodule)}.npz"
    if path.is_file():
        with np.load(path, allow_pickle=False) as npz:
            if npz["sample_ids"].astype(str).tolist() == table.sample_ids.tolist():
                log.info("backbone features read from %s", path)
                return np.asarray(npz["features"], dtype=np.float32)
    start = time.process_time()
    dataset = table.dataset(indices=np.arange(len(table)), transform=datamodule.transform(False))
    loader = torch.utils.data.DataLoader(dataset, batch_size=datamodule.batch_size,
                                         num_workers=datamodule.num_workers, shuffle=False)
    feats = predict(_Features(detector), loader, predictor(accelerator, precision))
    buf = io.BytesIO()
    np.savez(buf, features=feats.astype(np.float32), sample_ids=table.sample_ids,
             backbone=np.asarray(detector.hparams.backbone))
    atomic_write_bytes(path, buf.getvalue())
    log.info("backbone features of %d images computed in %.0f s CPU, cached in %s", len(feats),
             time.process_time() - start, path)
    return feats.astype(np.float32)


def frozen_datamodule(detector: ConceptDetector, datamodule: ConceptDataModule, cache_dir: str | os.PathLike,
                      *, accelerator: str = "auto", precision: str = "32-true") -> ConceptDataModule:
    """The data module of a frozen-backbone run: ``datamodule``'s rows, parts and folds over cached
    backbone features (:func:`backbone_features`) instead of images.

    Returns
    -------
    ConceptDataModule
        Same options as ``datamodule`` (batch size, fold, seed ...) but no augmentation and no
        loader worker processes; ``input_kind == "features"``; its samples are
        ``(features float32 (width,), concepts, class)``.
    """
    table = datamodule.table
    feats = backbone_features(detector, datamodule, cache_dir, accelerator=accelerator, precision=precision)
    info = {**table.info, "backbone_features": str(detector.hparams.backbone)}
    ft = FeatureTable(name=table.name, sample_ids=table.sample_ids, y=table.y, concepts=table.concepts,
                      split=table.split, class_names=table.class_names, concept_names=table.concept_names,
                      class_concepts=table.class_concepts, concept_groups=table.concept_groups,
                      info=info, features=feats)
    # in-memory vectors: worker processes would only add start-up cost
    options = {**datamodule.hparams, "augment": False, "num_workers": 0, "pin_memory": False}
    return ConceptDataModule(**options, table=ft)
