"""Datasets over precomputed per-image feature vectors.

:func:`load_feature_table` wraps any ``.npz`` holding ``X`` (n, d) and ``y`` (n,) with a
class-level concept matrix. :func:`load_awa_features` uses the real AwA image features shipped
in ``<data_root>/awa2/features/awa1_features.npz`` with the AwA2 predicate matrix as concepts and
the AwA2 splits (per-image stratified 60/20/20), so the whole pipeline runs on real images'
features on a CPU.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .awa2 import AWA2_FRACTIONS, load_awa2_metadata
from .common import (
    DataFormatError,
    DatasetLayoutError,
    check_training_images,
    select_classes,
    stratified_split,
)
from .tables import FeatureTable

__all__ = ["AWA_FEATURES_FILE", "load_feature_table", "load_awa_features"]

#: Default location of the AwA image features, relative to the AwA2 folder.
AWA_FEATURES_FILE = Path("features") / "awa1_features.npz"

FEATURES_LAYOUT = """\
  <file>.npz with arrays
    X  float (n_images, n_features)   per-image feature vectors
    y  int   (n_images,)              0-based class index (rows of the concept matrix)
    classes     (n_classes,)  optional, class names (checked against the concept source)
    image_ids   (n_images,)   optional, sample ids
(see datasets/awa_features/README.md)"""


def load_feature_table(
    npz_path: str | os.PathLike,
    class_concepts: np.ndarray,
    class_names: Sequence[str],
    concept_names: Sequence[str],
    *,
    name: str = "features",
    fractions: Sequence[float] = (0.6, 0.2, 0.2),
    seed: int = 0,
    standardize: bool = True,
    info: dict[str, Any] | None = None,
) -> FeatureTable:
    """A :class:`FeatureTable` over an ``.npz`` of per-image features.

    Parameters
    ----------
    npz_path : path-like
        File with ``X`` and ``y`` (and optionally ``classes`` and ``image_ids``).
    class_concepts : ndarray of shape (n_classes, n_concepts)
        Binary class-level concepts; an image's concepts are row ``y``.
    class_names, concept_names : sequence of str
    name : str
        Table name.
    fractions : sequence of 3 floats
        Per-class train/val/test fractions.
    seed : int
        Seed of the split.
    standardize : bool
        Standardise the features with the mean and standard deviation of the training rows
        (kept as ``feature_mean`` / ``feature_std`` on the table).
    info : dict, optional
        Extra provenance.
    """
    path = Path(npz_path)
    if not path.is_file():
        raise DatasetLayoutError(f"missing feature file {path}\nExpected:\n{FEATURES_LAYOUT}")
    with np.load(path, allow_pickle=False) as npz:
        missing = [k for k in ("X", "y") if k not in npz.files]
        if missing:
            raise DataFormatError(f"{path}: missing arrays {missing}\nExpected:\n{FEATURES_LAYOUT}")
        X = np.asarray(npz["X"], dtype=np.float32)
        y = np.asarray(npz["y"]).astype(np.int64)
        file_classes = [str(c) for c in npz["classes"]] if "classes" in npz.files else None
        ids = [str(i) for i in npz["image_ids"]] if "image_ids" in npz.files else None
    n_classes = len(class_names)
    if X.ndim != 2 or y.shape != (len(X),):
        raise DataFormatError(f"{path}: X must be (n, d) and y (n,), got {X.shape}, {y.shape}")
    if len(y) and (y.min() < 0 or y.max() >= n_classes):
        raise DataFormatError(f"{path}: class indices outside 0..{n_classes - 1}")
    if file_classes is not None and file_classes != list(class_names):
        raise DataFormatError(f"{path}: its class names differ from the concept source's")
    if not np.isfinite(X).all():
        raise DataFormatError(f"{path}: X holds non-finite values")
    if ids is None:
        ids = [f"{i}" for i in range(len(X))]
    if len(set(ids)) != len(ids):
        raise DataFormatError(f"{path}: duplicated image_ids")
    split = stratified_split(y, fractions, ("train", "val", "test"), seed)
    check_training_images(split, y, list(class_names))
    class_concepts = np.asarray(class_concepts, dtype=np.uint8)
    table = FeatureTable(
        name=name,
        sample_ids=ids,
        y=y,
        concepts=class_concepts[y],
        split=split,
        class_names=class_names,
        concept_names=concept_names,
        class_concepts=class_concepts,
        info={
            **(info or {}),
            "features_file": str(path),
            "n_features": int(X.shape[1]),
            "seed": seed,
            "fractions": list(fractions),
            "standardized": standardize,
        },
        features=X,
    )
    train = X[split == "train"]
    table.feature_mean = train.mean(axis=0) if standardize else np.zeros(X.shape[1], np.float32)
    std = train.std(axis=0) if standardize else np.ones(X.shape[1], np.float32)
    table.feature_std = np.where(std > 1e-6, std, 1.0).astype(np.float32)
    if standardize:
        table.features = ((X - table.feature_mean) / table.feature_std).astype(np.float32)
    return table


def load_awa_features(
    path: str | os.PathLike | None = None,
    *,
    root: str | os.PathLike | None = None,
    data_root: str | os.PathLike | None = None,
    classes: int | Sequence[int | str] | None = None,
    fractions: Sequence[float] = AWA2_FRACTIONS,
    seed: int = 0,
    standardize: bool = True,
) -> FeatureTable:
    """The AwA image features with the AwA2 predicates as concepts.

    Parameters
    ----------
    path : path-like, optional
        The ``.npz``; default ``<awa2 folder>/features/awa1_features.npz``.
    root, data_root : path-like, optional
        Where the AwA2 metadata lives (see :func:`cbm.data.awa2.load_awa2_metadata`).
    classes : int or sequence, optional
        Class subset (first N, or names / 1-based ids), re-indexed in the order given.
    fractions, seed, standardize
        As in :func:`load_feature_table`.
    """
    meta = load_awa2_metadata(root, data_root=data_root)
    npz = Path(path) if path is not None else meta.root / AWA_FEATURES_FILE
    table = load_feature_table(
        npz,
        meta.binary,
        meta.class_names,
        meta.predicate_names,
        name="awa_features",
        fractions=fractions,
        seed=seed,
        standardize=standardize,
        info={"root": str(meta.root), "concept_source": "predicate-matrix-binary"},
    )
    if classes is not None:
        ids = list(range(1, len(meta.class_names) + 1))
        table = table.subset_classes(select_classes(ids, meta.class_names, classes))
        table.info["classes"] = table.class_names
    return table
