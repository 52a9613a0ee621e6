"""Shared pieces of the data layer: errors, data-root resolution, the sample table, splits.

Every dataset in :mod:`cbm.data` is loaded into a :class:`SampleTable`: one row per sample with
its id, class index, binary concept vector and split (``train`` / ``val`` / ``test``, or ``novel``
for classes a dataset reserves as unseen). A table turns into torch datasets with
:meth:`SampleTable.dataset`; batches are ``(input, concepts float32 (k,), class int)``.
"""

from __future__ import annotations

import difflib
import logging
import os
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

__all__ = [
    "DATA_ROOT_ENV",
    "SPLITS",
    "ConceptDataset",
    "SampleTable",
    "DataFormatError",
    "DatasetLayoutError",
    "UnreadableImageError",
    "ImageFileTable",
    "ArrayImageTable",
    "FeatureTable",
    "resolve_data_root",
    "find_dataset_dir",
    "stratified_split",
    "select_classes",
    "read_pairs",
]

log = logging.getLogger(__name__)

#: Environment variable naming the folder that holds ``cub/``, ``awa2/`` ...
DATA_ROOT_ENV = "FERL_DATA_ROOT"

#: Split names a table may use.
SPLITS = ("train", "val", "test", "novel")

_REPO_ROOT = Path(__file__).resolve().parents[2]
_DEV_DATA_ROOT = _REPO_ROOT.parent / "shared" / "data"


class DatasetLayoutError(FileNotFoundError):
    """A dataset folder or file is missing; the message shows the expected layout."""


class DataFormatError(ValueError):
    """A dataset file is present but its content is inconsistent (duplicate or absent ids ...)."""


class UnreadableImageError(OSError):
    """An image file exists but cannot be decoded; the message names the file."""


# --------------------------------------------------------------------------------------------
# locating data


def resolve_data_root(data_root: str | os.PathLike | None = None) -> Path:
    """Return the folder that holds the datasets (``cub/``, ``awa2/`` ...).

    Resolution order: the explicit argument, else the environment variable ``FERL_DATA_ROOT``,
    else ``../shared/data`` relative to the repository (a development convenience only).

    Parameters
    ----------
    data_root : path-like or None
        Explicit data root.

    Returns
    -------
    path : Path
        An existing directory.

    Raises
    ------
    DatasetLayoutError
        When the chosen folder does not exist (the message names it).
    """
    if data_root is not None:
        path, how = Path(data_root).expanduser(), "the data_root argument"
    elif os.environ.get(DATA_ROOT_ENV):
        path, how = Path(os.environ[DATA_ROOT_ENV]).expanduser(), f"${DATA_ROOT_ENV}"
    else:
        path, how = _DEV_DATA_ROOT, "the development default ../shared/data"
    if not path.is_dir():
        raise DatasetLayoutError(
            f"data root {path} (from {how}) does not exist. Pass data_root=... or set "
            f"{DATA_ROOT_ENV} to a folder holding one sub-folder per dataset:\n"
            "  <data_root>/cub/CUB_200_2011/...\n  <data_root>/awa2/...\n"
            "(see datasets/<name>/README.md)"
        )
    return path


def find_dataset_dir(
    root: str | os.PathLike | None,
    *,
    name: str,
    candidates: Sequence[str],
    marker: str,
    layout: str,
    data_root: str | os.PathLike | None = None,
) -> Path:
    """Find a dataset's own folder: the one that contains ``marker``.

    ``root`` may point at the dataset folder itself or at a folder above it; when ``root`` is
    None the data root (see :func:`resolve_data_root`) is searched. Each of ``"."`` and
    ``candidates`` (relative paths) is tried below the starting folder.

    Raises
    ------
    DatasetLayoutError
        Naming every folder tried and showing ``layout``.
    """
    if root is not None:
        start = Path(root).expanduser()
        if not start.is_dir():
            raise DatasetLayoutError(f"{name} folder {start} does not exist. Expected:\n{layout}")
    else:
        start = resolve_data_root(data_root)
    tried = []
    for rel in (".", *candidates):
        cand = (start / rel) if rel != "." else start
        tried.append(cand)
        if (cand / marker).is_file():
            return cand
    listing = "\n".join(f"  {t}" for t in tried)
    raise DatasetLayoutError(
        f"no {name} data set found: none of these folders holds {marker}:\n{listing}\n"
        f"Expected layout:\n{layout}"
    )


def require_file(path: Path, layout: str, what: str | None = None) -> Path:
    """Return ``path`` if it is a file, else raise :class:`DatasetLayoutError` naming it."""
    if not path.is_file():
        raise DatasetLayoutError(f"missing {what or 'file'}: {path}\nExpected layout:\n{layout}")
    return path


def read_pairs(path: Path, value_type: Callable[[str], Any] = str) -> dict[int, Any]:
    """Read a CUB-style ``<id> <value>`` file into ``{id: value}`` (file order kept).

    The value is the rest of the line after the first run of whitespace.

    Raises
    ------
    DataFormatError
        On a malformed line or a duplicated id (the message names the file and line).
    """
    out: dict[int, Any] = {}
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.strip()
            if not line:
                continue
            parts = line.split(maxsplit=1)
            if len(parts) != 2:
                raise DataFormatError(f"{path}:{lineno}: expected '<id> <value>', got {line!r}")
            try:
                key = int(parts[0])
                value = value_type(parts[1].strip())
            except ValueError as err:
                raise DataFormatError(f"{path}:{lineno}: cannot parse {line!r}") from err
            if key in out:
                raise DataFormatError(f"{path}:{lineno}: duplicated id {key}")
            out[key] = value
    return out


def close_matches(name: str, options: Iterable[str]) -> str:
    """A short ``did you mean`` hint for an unknown name."""
    options = list(options)
    near = difflib.get_close_matches(name, options, n=3, cutoff=0.5)
    hint = f" Did you mean {', '.join(map(repr, near))}?" if near else ""
    return f"{hint} Known: {', '.join(options[:20])}{' ...' if len(options) > 20 else ''}."


# --------------------------------------------------------------------------------------------
# splits and class subsets


def stratified_split(
    y: np.ndarray,
    fractions: Sequence[float],
    names: Sequence[str],
    seed: int,
) -> np.ndarray:
    """Seeded per-class split of samples into named parts with the given fractions.

    Inside each class the samples are shuffled with ``numpy.random.default_rng([seed, c])`` (so a
    class's split does not depend on the other classes present) and cut into parts whose sizes
    are the rounded fractions (largest remainder, so the counts add up).
    The first part (training) keeps at least one sample of every class.

    Parameters
    ----------
    y : ndarray of shape (n_samples,)
        Class indices.
    fractions : sequence of float
        One fraction per part, summing to 1.
    names : sequence of str
        Part names, same length as ``fractions``.
    seed : int
        Seed of the shuffle.

    Returns
    -------
    split : ndarray of shape (n_samples,), dtype '<U5'
        Part name per sample.
    """
    fractions = np.asarray(fractions, dtype=float)
    if len(fractions) != len(names) or not np.isclose(fractions.sum(), 1.0):
        raise ValueError(f"fractions {fractions.tolist()} must match names and sum to 1")
    y = np.asarray(y)
    out = np.empty(len(y), dtype="<U5")
    for c in np.unique(y):
        rng = np.random.default_rng([int(seed), int(c)])
        idx = np.flatnonzero(y == c)
        idx = idx[rng.permutation(len(idx))]
        raw = fractions * len(idx)
        counts = np.floor(raw).astype(int)
        order = np.argsort(-(raw - counts), kind="stable")
        counts[order[: len(idx) - counts.sum()]] += 1
        if counts[0] == 0 and len(idx) > 0:  # keep one training sample per class
            donor = int(np.argmax(counts))
            counts[donor] -= 1
            counts[0] += 1
        start = 0
        for name, cnt in zip(names, counts, strict=True):
            out[idx[start : start + cnt]] = name
            start += cnt
    return out


def select_classes(
    available: Sequence[int],
    names: Sequence[str],
    classes: int | Sequence[int | str] | None,
    aliases: dict[str, int] | None = None,
) -> list[int]:
    """Resolve a class subset to positions in ``available``.

    Parameters
    ----------
    available : sequence of int
        Class ids in their canonical order.
    names : sequence of str
        Names of the same classes.
    classes : int, sequence of int or str, or None
        None: all classes. An int N: the first N. A sequence: class ids (as listed in
        ``available``) or names, in the order given (labels are re-indexed in that order).
    aliases : dict, optional
        Extra names mapping to a position.

    Returns
    -------
    positions : list of int
        Positions into ``available``.
    """
    n = len(available)
    if classes is None:
        return list(range(n))
    if isinstance(classes, int | np.integer):
        if not 1 <= classes <= n:
            raise ValueError(f"classes={classes}: must be between 1 and {n}")
        return list(range(int(classes)))
    by_id = {int(c): i for i, c in enumerate(available)}
    by_name = {str(nm): i for i, nm in enumerate(names)}
    by_name.update(aliases or {})
    out: list[int] = []
    for c in classes:
        if isinstance(c, int | np.integer):
            if int(c) not in by_id:
                raise ValueError(f"unknown class id {c}; available ids: {list(by_id)[:10]} ...")
            out.append(by_id[int(c)])
        else:
            if str(c) not in by_name:
                raise ValueError(f"unknown class {c!r}." + close_matches(str(c), by_name))
            out.append(by_name[str(c)])
    if len(set(out)) != len(out):
        raise ValueError(f"classes lists a class twice: {list(classes)}")
    if not out:
        raise ValueError("classes is empty")
    return out


def check_unique(values: Sequence[Any], what: str, source: Path | str) -> None:
    """Raise :class:`DataFormatError` when ``values`` holds duplicates."""
    counts = Counter(values)
    dup = [v for v, n in counts.items() if n > 1]
    if dup:
        raise DataFormatError(f"{source}: duplicated {what}: {dup[:10]}")


def check_training_images(split: np.ndarray, y: np.ndarray, class_names: Sequence[str]) -> None:
    """Raise :class:`DataFormatError` when a class has no training sample."""
    present = set(np.unique(y[split == "train"]).tolist())
    missing = [class_names[c] for c in range(len(class_names)) if c not in present]
    if missing:
        raise DataFormatError(f"classes with no training image: {missing[:10]}")


# --------------------------------------------------------------------------------------------
# the table and its torch datasets


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
    """A table whose inputs are image files (decoded with PIL, converted to RGB)."""

    def __init__(self, *, paths: Sequence[str | os.PathLike], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.paths = np.asarray([str(p) for p in paths], dtype=object)
        if len(self.paths) != len(self.sample_ids):
            raise ValueError("one path per sample expected")

    def load(self, i: int) -> Image.Image:
        path = self.paths[i]
        try:
            with Image.open(path) as img:
                return img.convert("RGB")
        except FileNotFoundError as err:
            raise DatasetLayoutError(f"image file missing: {path}") from err
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
    """Decode every image (reduced-size JPEG draft, so it is quick).

    Returns a keep-mask and the list of unreadable files; raises
    :class:`UnreadableImageError` on the first bad file when ``on_unreadable == "error"``.
    """
    keep = np.ones(len(paths), dtype=bool)
    bad: list[str] = []
    for i, p in enumerate(paths):
        try:
            with Image.open(p) as img:
                img.draft("RGB", (32, 32))
                img.load()
        except Exception as err:
            if on_unreadable == "error":
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
