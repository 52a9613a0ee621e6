"""Class-disjoint folds for the open-world protocol.

The classes are partitioned into ``k`` folds; in fold ``i`` the classes of part ``i`` are
*held out* (removed before training the detector and the heads) and the others are *retained*.
Folds are seeded, checked disjoint and covering, and saved with the run as JSON.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .common import DataFormatError

__all__ = [
    "ClassFold",
    "class_disjoint_folds",
    "check_folds",
    "save_folds",
    "load_folds",
    "open_world_split",
]

FOLDS_SCHEMA = "ferl-cbm/class-folds"
FOLDS_VERSION = 1


@dataclass(frozen=True)
class ClassFold:
    """One class-disjoint fold.

    Attributes
    ----------
    index : int
        Fold number, 0-based.
    retained : tuple of int
        Classes used for training, calibration and in-distribution testing.
    held_out : tuple of int
        Classes removed before training; their test images are the novel samples.
    """

    index: int
    retained: tuple[int, ...]
    held_out: tuple[int, ...]

    def __post_init__(self) -> None:
        overlap = set(self.retained) & set(self.held_out)
        if overlap:
            raise DataFormatError(f"fold {self.index}: classes both retained and held out: {sorted(overlap)}")
        if not self.held_out or not self.retained:
            raise DataFormatError(f"fold {self.index}: needs retained and held-out classes")

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "retained": list(self.retained), "held_out": list(self.held_out)}


def class_disjoint_folds(n_classes: int, k: int = 5, seed: int = 0) -> list[ClassFold]:
    """Partition ``n_classes`` classes into ``k`` seeded class-disjoint folds.

    The classes are shuffled with ``numpy.random.default_rng(seed)`` and cut into ``k`` parts of
    sizes differing by at most one; fold ``i`` holds out part ``i``.

    Parameters
    ----------
    n_classes : int
        Number of classes (indices 0..n_classes-1), at least ``k``.
    k : int
        Number of folds, at least 2.
    seed : int

    Returns
    -------
    folds : list of ClassFold
        Held-out sets are disjoint and together cover every class.
    """
    if k < 2:
        raise ValueError(f"k must be >= 2, got {k}")
    if n_classes < k:
        raise ValueError(f"cannot make {k} class-disjoint folds of {n_classes} classes")
    perm = np.random.default_rng(seed).permutation(n_classes)
    parts = np.array_split(perm, k)
    everything = set(range(n_classes))
    folds = [
        ClassFold(
            index=i,
            retained=tuple(sorted(everything - set(p.tolist()))),
            held_out=tuple(sorted(p.tolist())),
        )
        for i, p in enumerate(parts)
    ]
    check_folds(folds, n_classes)
    return folds


def check_folds(folds: Sequence[ClassFold], n_classes: int) -> None:
    """Assert that held-out sets are disjoint, cover all classes, and complement ``retained``.

    Raises
    ------
    DataFormatError
    """
    seen: dict[int, int] = {}
    everything = set(range(n_classes))
    for f in folds:
        for c in f.held_out:
            if c in seen:
                raise DataFormatError(f"class {c} is held out in folds {seen[c]} and {f.index}")
            seen[c] = f.index
        if set(f.retained) | set(f.held_out) != everything:
            raise DataFormatError(
                f"fold {f.index}: retained + held-out classes do not make up 0..{n_classes - 1}"
            )
    missing = sorted(everything - set(seen))
    if missing:
        raise DataFormatError(f"classes never held out: {missing}")


def save_folds(
    path: str | os.PathLike,
    folds: Sequence[ClassFold],
    *,
    n_classes: int,
    seed: int | None = None,
    class_names: Sequence[str] | None = None,
    dataset: str | None = None,
) -> Path:
    """Write folds as JSON (atomically: temporary file, then rename)."""
    check_folds(folds, n_classes)
    if class_names is not None and len(class_names) != n_classes:
        raise ValueError("class_names must have n_classes entries")
    doc = {
        "schema": FOLDS_SCHEMA,
        "version": FOLDS_VERSION,
        "dataset": dataset,
        "n_classes": n_classes,
        "k": len(folds),
        "seed": seed,
        "class_names": list(class_names) if class_names is not None else None,
        "folds": [f.to_dict() for f in folds],
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    os.replace(tmp, path)
    return path


def load_folds(path: str | os.PathLike, *, class_names: Sequence[str] | None = None) -> list[ClassFold]:
    """Read folds written by :func:`save_folds` and check them.

    Parameters
    ----------
    path : path-like
    class_names : sequence of str, optional
        When given (and the file holds names), they must match, so folds are not applied to a
        different class order.
    """
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise
    except (OSError, json.JSONDecodeError) as err:
        raise DataFormatError(f"cannot read folds from {path}: {err}") from err
    if doc.get("schema") != FOLDS_SCHEMA or doc.get("version") != FOLDS_VERSION:
        raise DataFormatError(f"{path}: not a folds file of schema {FOLDS_SCHEMA} version {FOLDS_VERSION}")
    folds = [ClassFold(int(f["index"]), tuple(f["retained"]), tuple(f["held_out"])) for f in doc["folds"]]
    check_folds(folds, int(doc["n_classes"]))
    if class_names is not None and doc.get("class_names") is not None:
        if list(class_names) != list(doc["class_names"]):
            raise DataFormatError(f"{path}: the saved class names differ from the data set's")
    return folds


def open_world_split(
    y: np.ndarray,
    split: np.ndarray,
    fold: ClassFold,
    novel_splits: Sequence[str] = ("test",),
) -> dict[str, np.ndarray]:
    """Row indices of the open-world parts of one fold.

    Parameters
    ----------
    y : ndarray of shape (n_samples,)
        Class per sample.
    split : ndarray of shape (n_samples,)
        ``train`` / ``val`` / ``test`` per sample.
    fold : ClassFold
    novel_splits : sequence of str
        Which splits of the held-out classes form the novel set (the test images by default:
        held-out classes are used only for final evaluation).

    Returns
    -------
    parts : dict
        ``train``, ``val``, ``test`` (retained classes only) and ``novel`` (held-out classes).
    """
    y = np.asarray(y)
    split = np.asarray(split)
    retained = np.isin(y, fold.retained)
    held = np.isin(y, fold.held_out)
    parts = {s: np.flatnonzero(retained & (split == s)) for s in ("train", "val", "test")}
    parts["novel"] = np.flatnonzero(held & np.isin(split, list(novel_splits)))
    leak = np.intersect1d(y[parts["train"]], np.asarray(fold.held_out))
    if leak.size:  # pragma: no cover - guarded by construction
        raise DataFormatError(f"held-out classes leak into training: {leak.tolist()}")
    return parts
