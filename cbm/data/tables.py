"""The sample table every dataset loads into, and its torch datasets.

A :class:`SampleTable` holds one row per sample: its id, class index, binary concept vector and
split (``train`` / ``val`` / ``test``, or ``novel`` for classes a dataset reserves as unseen).
:meth:`SampleTable.dataset` turns it into torch datasets whose batches are
``(input, concepts float32 (k,), class int)``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

from .common import SPLITS, DatasetLayoutError, UnreadableImageError
from .images import open_rgb

__all__ = [
    "ConceptDataset",
    "SampleTable",
    "ImageFileTable",
    "ArrayImageTable",
    "FeatureTable",
    "check_images_readable",
    "check_on_unreadable",
    "keep_readable",
]

log = logging.getLogger(__name__)

class SampleTable:
    """All samples of one dataset: ids, classes, concepts, splits, names.

    Subclasses say how to load one sample's input (:meth:`load`).

    Attributes
    ----------
    name : str
        Dataset name (``"cub"``, ``"awa2"``, ``"awa_features"``, ``"synthetic"``).
    sample_ids : ndarray of shape (n_samples,), dtype str
    y : ndarray of shape (n_samples,), dtype int64
        Class index into ``class_names``.
    concepts : ndarray of shape (n_samples, n_concepts), dtype uint8
        Binary concept labels per sample.
    split : ndarray of shape (n_samples,), dtype str
        One of ``train``, ``val``, ``test``, ``novel``.
    class_names, concept_names : list of str
    class_concepts : ndarray of shape (n_classes, n_concepts), dtype uint8
        Class-level concept profile.
    concept_groups : dict of str to list of int, or None
        Group name -> concept indices, where the dataset defines groups.
    info : dict
        Provenance worth saving with a run (e.g. ``concept_source``, ``seed``).
    kind : str
        ``"image"`` or ``"features"``.
    """

    kind = "image"

    def __init__(
        self,
        *,
        name: str,
        sample_ids: Sequence[str],
        y: np.ndarray,
        concepts: np.ndarray,
        split: np.ndarray,
        class_names: Sequence[str],
        concept_names: Sequence[str],
        class_concepts: np.ndarray,
        concept_groups: dict[str, list[int]] | None = None,
        info: dict[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.sample_ids = np.asarray(sample_ids, dtype=str)
        self.y = np.asarray(y, dtype=np.int64)
        self.concepts = np.ascontiguousarray(concepts, dtype=np.uint8)
        self.split = np.asarray(split, dtype="<U5")
        self.class_names = list(class_names)
        self.concept_names = list(concept_names)
        self.class_concepts = np.asarray(class_concepts, dtype=np.uint8)
        self.concept_groups = concept_groups
        self.info = dict(info or {})
        n = len(self.sample_ids)
        k = len(self.concept_names)
        if self.y.shape != (n,) or self.split.shape != (n,) or self.concepts.shape != (n, k):
            raise ValueError(
                f"inconsistent table shapes: ids {n}, y {self.y.shape}, split "
                f"{self.split.shape}, concepts {self.concepts.shape}, {k} concept names"
            )
        if self.class_concepts.shape != (len(self.class_names), k):
            raise ValueError(
                f"class_concepts has shape {self.class_concepts.shape}, expected "
                f"({len(self.class_names)}, {k})"
            )
        bad = sorted(set(self.split.tolist()) - set(SPLITS))
        if bad:
            raise ValueError(f"unknown split names {bad}; allowed: {SPLITS}")
        if n and (self.y.min() < 0 or self.y.max() >= len(self.class_names)):
            raise ValueError("class index out of range of class_names")

    # -- sizes ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.sample_ids)

    @property
    def n_classes(self) -> int:
        return len(self.class_names)

    @property
    def n_concepts(self) -> int:
        return len(self.concept_names)

    def __repr__(self) -> str:
        counts = {s: int((self.split == s).sum()) for s in SPLITS if (self.split == s).any()}
        return (
            f"{type(self).__name__}(name={self.name!r}, n_samples={len(self)}, "
            f"n_classes={self.n_classes}, n_concepts={self.n_concepts}, splits={counts})"
        )

    # -- access --------------------------------------------------------------------------
    def load(self, i: int) -> Any:
        """Return the input of sample ``i`` (a PIL image, an HxWx3 array or a vector)."""
        raise NotImplementedError

    def indices(
        self, split: str | Sequence[str] | None = None, classes: Iterable[int] | None = None
    ) -> np.ndarray:
        """Row indices of the samples in ``split`` (one name or several) and ``classes``."""
        mask = np.ones(len(self), dtype=bool)
        if split is not None:
            names = [split] if isinstance(split, str) else list(split)
            bad = sorted(set(names) - set(SPLITS))
            if bad:
                raise ValueError(f"unknown split {bad}; allowed: {SPLITS}")
            mask &= np.isin(self.split, names)
        if classes is not None:
            mask &= np.isin(self.y, np.fromiter(classes, dtype=np.int64))
        return np.flatnonzero(mask)

    def dataset(
        self,
        split: str | Sequence[str] | None = None,
        transform: Callable[[Any], Any] | None = None,
        classes: Iterable[int] | None = None,
        indices: np.ndarray | None = None,
    ) -> ConceptDataset:
        """A torch dataset over the samples of ``split`` (and ``classes``), or given indices."""
        if indices is None:
            indices = self.indices(split, classes)
        return ConceptDataset(self, indices, transform)

    def subset_classes(self, positions: Sequence[int]) -> SampleTable:
        """A copy restricted to the classes at ``positions``, re-indexed in that order."""
        positions = list(positions)
        remap = np.full(self.n_classes, -1, dtype=np.int64)
        remap[positions] = np.arange(len(positions))
        keep = np.flatnonzero(remap[self.y] >= 0)
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.sample_ids = self.sample_ids[keep]
        new.y = remap[self.y[keep]]
        new.concepts = self.concepts[keep]
        new.split = self.split[keep]
        new.class_names = [self.class_names[p] for p in positions]
        new.class_concepts = self.class_concepts[positions]
        new.info = dict(self.info)
        new._take_rows(keep)
        return new

    def _take_rows(self, keep: np.ndarray) -> None:
        """Subclass hook: restrict per-row storage to ``keep``."""

    def summary(self) -> dict[str, Any]:
        """A JSON-able description (sizes, names, info) to save with a run."""
        return {
            "name": self.name,
            "n_samples": len(self),
            "n_classes": self.n_classes,
            "n_concepts": self.n_concepts,
            "splits": {s: int((self.split == s).sum()) for s in SPLITS},
            "class_names": self.class_names,
            "concept_names": self.concept_names,
            "concept_groups": self.concept_groups,
            "info": self.info,
        }


class ImageFileTable(SampleTable):
    """A table whose inputs are image files (decoded as 8-bit RGB, :func:`cbm.data.images.open_rgb`)."""

    def __init__(self, *, paths: Sequence[str | os.PathLike], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.paths = np.asarray([str(p) for p in paths], dtype=object)
        if len(self.paths) != len(self.sample_ids):
            raise ValueError("one path per sample expected")

    def load(self, i: int) -> Image.Image:
        path = self.paths[i]
        try:
            return open_rgb(path)  # 16-bit images scaled to 8 bits, not clipped to white
        except FileNotFoundError as err:
            raise DatasetLayoutError(f"image file missing: {path}") from err
        except UnreadableImageError:
            raise
        except Exception as err:  # PIL raises several types for bad data
            raise UnreadableImageError(f"cannot read image {path}: {err}") from err

    def _take_rows(self, keep: np.ndarray) -> None:
        self.paths = self.paths[keep]


class ArrayImageTable(SampleTable):
    """A table whose inputs are held in memory as a uint8 array of shape (n, H, W, 3)."""

    def __init__(self, *, images: np.ndarray, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if images.ndim != 4 or images.shape[-1] != 3 or len(images) != len(self.sample_ids):
            raise ValueError(f"images must have shape (n, H, W, 3), got {images.shape}")
        self.images = images

    def load(self, i: int) -> np.ndarray:
        return self.images[i]

    def _take_rows(self, keep: np.ndarray) -> None:
        self.images = self.images[keep]


class FeatureTable(SampleTable):
    """A table whose inputs are precomputed feature vectors, float32 of shape (n, d)."""

    kind = "features"

    def __init__(self, *, features: np.ndarray, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if features.ndim != 2 or len(features) != len(self.sample_ids):
            raise ValueError(f"features must have shape (n, d), got {features.shape}")
        self.features = features

    @property
    def n_features(self) -> int:
        return int(self.features.shape[1])

    def load(self, i: int) -> np.ndarray:
        return self.features[i]

    def _take_rows(self, keep: np.ndarray) -> None:
        self.features = self.features[keep]


class ConceptDataset(Dataset):
    """Torch dataset over some rows of a :class:`SampleTable`.

    Items are ``(input, concepts, class)``: the (transformed) input, the concept vector as a
    float32 tensor of shape (n_concepts,), and the class index as an int.
    """

    def __init__(
        self,
        table: SampleTable,
        indices: np.ndarray,
        transform: Callable[[Any], Any] | None = None,
    ) -> None:
        self.table = table
        self.indices = np.asarray(indices, dtype=np.int64)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, item: int) -> tuple[Any, torch.Tensor, int]:
        i = int(self.indices[item])
        x = self.table.load(i)
        if self.transform is not None:
            x = self.transform(x)
        c = torch.from_numpy(self.table.concepts[i].astype(np.float32))
        return x, c, int(self.table.y[i])

    @property
    def sample_ids(self) -> np.ndarray:
        return self.table.sample_ids[self.indices]

    @property
    def targets(self) -> np.ndarray:
        return self.table.y[self.indices]

    @property
    def concept_labels(self) -> np.ndarray:
        return self.table.concepts[self.indices]


def check_images_readable(paths: Sequence[str], on_unreadable: str) -> tuple[np.ndarray, list[str]]:
    """Decode every image as the loader does (:func:`cbm.data.images.open_rgb`; a reduced-size JPEG
    draft, so it is quick).

    Returns a keep-mask and the list of unreadable files; raises
    :class:`UnreadableImageError` on the first bad file when ``on_unreadable == "error"``.
    """
    keep = np.ones(len(paths), dtype=bool)
    bad: list[str] = []
    for i, p in enumerate(paths):
        try:
            open_rgb(p, min_side=32)  # as the loader decodes it (refused values fail here too)
        except Exception as err:
            if on_unreadable == "error":
                if isinstance(err, UnreadableImageError):
                    raise
                raise UnreadableImageError(f"cannot read image {p}: {err}") from err
            keep[i] = False
            bad.append(str(p))
    if bad:
        log.warning("skipped %d unreadable image(s), e.g. %s", len(bad), bad[0])
    return keep, bad


def check_on_unreadable(value: str) -> str:
    if value not in ("error", "skip"):
        raise ValueError(f"on_unreadable must be 'error' or 'skip', got {value!r}")
    return value


def keep_readable(paths: Sequence, info: dict, *, check_images: bool, on_unreadable: str) -> np.ndarray:
    """The image loaders' up-front check of their files: a keep-mask over ``paths``.

    Parameters
    ----------
    paths : sequence of path-like
        The loader's image files.
    info : dict
        The table's ``info``; gets ``"skipped_images"`` (list of str) and ``"n_skipped_images"``
        when the images are checked.
    check_images : bool
        Decode every image up front (otherwise a bad file fails only when it is loaded).
    on_unreadable : {"error", "skip"}
        ``"skip"`` checks the images up front too, and drops the unreadable ones.

    Returns
    -------
    keep : ndarray of shape (len(paths),), bool
        All True unless ``on_unreadable == "skip"`` found unreadable files.

    Raises
    ------
    UnreadableImageError
        The first unreadable file, with ``check_images`` and ``on_unreadable == "error"``.
    """
    if not (check_images or on_unreadable == "skip"):
        return np.ones(len(paths), dtype=bool)
    keep, bad = check_images_readable([str(p) for p in paths], on_unreadable)
    info.update(skipped_images=bad, n_skipped_images=len(bad))
    return keep
