"""The shift-calibration table: the val images under the validation corruptions, through the detector.

The heads' shift-adaptive sets (`ferl.evidence.adaptive`) learn how far their threshold must fall
with the shift score from held-out images under *calibration* corruptions: ImageNet-C's four
held-apart validation corruptions (`cbm.data.corruptions.VALIDATION`), never the evaluated ones.
``train-detector`` writes the table (``concepts/val_shift.npz``) with its export: each val image at
a few severities of each corruption, through the best detector's features
(`cbm.detector.export.detector_outputs`) and feature typicality. Each image's severities and pixels
are drawn from its own sample id, so an image is corrupted alike in every run over the same data;
with a frozen backbone its features are cached in the feature cache beside the clean ones
(`cbm.detector.frozen`), so the open-world folds, which share the backbone, corrupt each image once.
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from cbm.data import ConceptDataModule
from cbm.data.concept_tables import SHIFT_SPLIT, ConceptTable
from cbm.data.corruptions import SEVERITIES, CorruptedDataset, check_corruptions, corruption_seed
from cbm.detector.export import detector_outputs
from cbm.detector.frozen import features_key
from cbm.detector.module import ConceptDetector
from cbm.detector.typicality import FeatureTypicality
from ferl.io.persist import atomic_write_bytes

__all__ = ["shift_draws", "shift_table"]


def shift_draws(sample_ids: Sequence[str], corruptions: Sequence[str], draws: int,
                seed: int) -> tuple[np.ndarray, list[str], list[int]]:
    """Which (row, corruption, severity) the shift-calibration table holds.

    Each row is corrupted by each of ``corruptions`` at ``draws`` distinct severities drawn at random
    (without replacement) from 1-5 by a generator seeded from ``seed``, the corruption and the row's
    sample id (`cbm.data.corruptions.corruption_seed`); ``draws = 5`` takes every severity.

    Returns
    -------
    rows : ndarray of shape (m,), int64
        Positions in ``sample_ids``.
    names : list of str, length m
    severities : list of int, length m

    Raises
    ------
    ValueError
        An unknown corruption, ``draws`` outside 1-5.
    """
    corruptions = check_corruptions(corruptions)
    if isinstance(draws, bool) or not isinstance(draws, int) or not 1 <= draws <= len(SEVERITIES):
        raise ValueError(f"draws must be an integer in 1-{len(SEVERITIES)}, got {draws!r}")
    rows, names, severities = [], [], []
    for name in corruptions:
        for row, sid in enumerate(sample_ids):
            rng = np.random.default_rng(corruption_seed(seed, name, 0, str(sid)))
            for severity in sorted(rng.choice(SEVERITIES, size=draws, replace=False).tolist()):
                rows.append(row)
                names.append(name)
                severities.append(int(severity))
    return np.asarray(rows, dtype=np.int64), names, severities


def _outputs(detector: ConceptDetector, datamodule: ConceptDataModule, rows: np.ndarray, names: list[str],
             severities: list[int], seed: int, accelerator: str, precision: str | None,
             cache_dir: Path | None) -> tuple[np.ndarray, np.ndarray]:
    """Features and probabilities of the corrupted images; a frozen backbone's features from the cache
    (``<cache_dir>/corrupted/<features key>-seed<seed>.npz``, one entry per image and corruption) where
    present, the missing ones computed and added."""
    table = datamodule.table
    source = table.sample_ids[rows].astype(str)
    ids = [f"{s}@{c}-{v}" for s, c, v in zip(source, names, severities, strict=True)]
    cached: dict[str, np.ndarray] = {}
    path = None
    if detector.frozen and cache_dir is not None:
        path = Path(cache_dir) / "corrupted" / f"{features_key(detector, datamodule)}-seed{seed}.npz"
        if path.is_file():
            with np.load(path, allow_pickle=False) as npz:
                cached = dict(zip(npz["ids"].astype(str).tolist(), npz["features"], strict=True))
    missing = [i for i, key in enumerate(ids) if key not in cached]
    if missing:
        dataset: Dataset = CorruptedDataset(table, rows[missing], [names[i] for i in missing],
                                            [severities[i] for i in missing], seed, datamodule.image_size,
                                            datamodule.eval_crop_fraction)
        loader = DataLoader(dataset, batch_size=datamodule.batch_size, num_workers=datamodule.num_workers,
                            shuffle=False)
        features, probs = detector_outputs(detector, loader, accelerator=accelerator, precision=precision,
                                           doing="corrupting the val images for the shift calibration")
        if path is None:
            return features, probs
        cached.update(zip([ids[i] for i in missing], features, strict=True))
        buf = io.BytesIO()
        np.savez(buf, ids=np.asarray(list(cached)), features=np.stack(list(cached.values())))
        atomic_write_bytes(path, buf.getvalue())
    features = np.stack([cached[key] for key in ids]).astype(np.float32)
    with torch.inference_mode():
        probs = torch.sigmoid(detector.head(torch.from_numpy(features)).float()).numpy()
    return features, probs


def shift_table(detector: ConceptDetector, datamodule: ConceptDataModule, typicality: FeatureTypicality,
                corruptions: Sequence[str], draws: int, seed: int, *, accelerator: str = "auto",
                precision: str | None = "32-true", part: str = "val",
                cache_dir: str | os.PathLike | None = None) -> ConceptTable:
    """The shift-calibration table: ``part``'s images under ``corruptions``, through ``detector``.

    Parameters
    ----------
    detector : ConceptDetector
        An image detector (the run's best checkpoint).
    datamodule : ConceptDataModule
        The image data module of the run (set up).
    typicality : FeatureTypicality
        The run's feature typicality: each row's ``feature_score``.
    corruptions : sequence of str
        Calibration corruptions (`cbm.data.corruptions.VALIDATION`, never the evaluated ones).
    draws, seed : int
        See `shift_draws`; ``seed`` also seeds the corruptions' pixels.
    accelerator, precision : str
    part : str
        The split to corrupt (``val``: held out from the detector and the heads' fit).
    cache_dir : path-like, optional
        A frozen backbone's feature cache (module docstring); None: no cache.

    Returns
    -------
    ConceptTable
        Split `SHIFT_SPLIT`: ``sample_ids`` ``<id>@<corruption>-<severity>``, ``feature_score`` and
        the ``shift`` columns (each row's clean ``source_ids``, ``corruption``, ``severity``).

    Raises
    ------
    ValueError
        A detector or data set that does not read images, bad corruptions or ``draws``.
    """
    if detector.hparams.input_kind != "image" or datamodule.table.kind != "image":
        raise ValueError("the shift-calibration table corrupts images: this run's detector or data set "
                         "does not read images")
    table, rows = datamodule.table, datamodule.parts[part]
    pos, names, severities = shift_draws(table.sample_ids[rows].tolist(), corruptions, draws, seed)
    features, probs = _outputs(detector, datamodule, rows[pos], names, severities, seed, accelerator,
                               precision, None if cache_dir is None else Path(cache_dir))
    source = table.sample_ids[rows[pos]].astype(str)
    ids = np.array([f"{s}@{c}-{v}" for s, c, v in zip(source, names, severities, strict=True)])
    return ConceptTable(probs=probs, concept_labels=table.concepts[rows[pos]], y=table.y[rows[pos]],
                        concept_names=list(table.concept_names), class_names=list(table.class_names),
                        sample_ids=ids, split=SHIFT_SPLIT, concept_groups=table.concept_groups,
                        feature_score=typicality.score(features),
                        shift={"source_ids": source, "corruption": np.asarray(names),
                               "severity": np.asarray(severities)})
