"""Shared pieces of the data layer: errors, data-root resolution, file readers, splits.

Every dataset in :mod:`cbm.data` is loaded into a :class:`cbm.data.tables.SampleTable`.
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

__all__ = [
    "DATA_ROOT_ENV",
    "SPLITS",
    "DataFormatError",
    "DatasetLayoutError",
    "UnreadableImageError",
    "check_split_sizes",
    "not_utf8",
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


def check_split_sizes(counts: dict[str, int], splits: Sequence[str] = ("train", "val", "test")) -> None:
    """Raise ValueError unless every split of ``splits`` has samples and train has at least two.

    The checks ``train-detector`` makes before training (:func:`cbm.detector.export.export_loaders`
    for the splits it exports, the data module's training loader for train), shared with
    ``python -m cbm.data.validate`` so that it refuses a data set with the same message.

    Parameters
    ----------
    counts : dict of str to int
        Samples per split (a split absent from it has none).
    splits : sequence of str
        The splits that must not be empty (``train-detector``'s ``export_splits``).
    """
    for split in splits:
        if counts.get(split, 0) == 0:
            raise ValueError(f"split {split!r} has no samples: remove it from export_splits, or give each "
                             "class more samples (a per-class split of very few samples can be empty)")
    if "train" in splits and counts["train"] < 2:
        raise ValueError(f"the training split has {counts['train']} sample(s); training needs at least 2 "
                         "(give each class more samples)")


#: How to fix a CSV that is not UTF-8.
UTF8_FIX = "save it as UTF-8 (\"CSV UTF-8\" in a spreadsheet)"


def not_utf8(path: Path | str, err: UnicodeDecodeError) -> DataFormatError:
    """The error for a text file that is not UTF-8: the file, the first byte that is not, the fix."""
    byte = err.object[err.start]
    return DataFormatError(f"{path} is not UTF-8 text (byte {byte:#04x} is not UTF-8): {UTF8_FIX}")
