"""Animals with Attributes 2 (AwA2): 50 classes, 85 binary class-level predicates.

Following the FERL paper (appendix G) all 50 classes are used (not the zero-shot split) with a
seeded, per-image stratified 60/20/20 train/val/test partition. The official 40/10 seen/unseen
class split is kept in ``info`` for reference.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .common import (
    DataFormatError,
    DatasetLayoutError,
    check_training_images,
    find_dataset_dir,
    read_pairs,
    require_file,
    select_classes,
    stratified_split,
)
from .tables import ImageFileTable, check_on_unreadable, keep_readable

__all__ = ["AWA2_LAYOUT", "AWA2_FRACTIONS", "AwA2Metadata", "load_awa2_metadata", "load_awa2"]

#: Per-image train/val/test fractions (paper appendix G).
AWA2_FRACTIONS = (0.6, 0.2, 0.2)

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")

AWA2_LAYOUT = """\
  Animals_with_Attributes2/        (or <data_root>/awa2/)
    JPEGImages/<class>/<class>_<NNNNN>.jpg   (one folder per class of classes.txt)
    classes.txt                    <id>\\t<name>   (names use '+', e.g. grizzly+bear)
    predicates.txt                 <id>\\t<name>   (85 predicates)
    predicate-matrix-binary.txt    50 x 85 of 0/1, rows in classes.txt order
    trainclasses.txt, testclasses.txt  (zero-shot split, one class name a line)
(see datasets/awa2/README.md)"""


@dataclass(frozen=True)
class AwA2Metadata:
    """The class/predicate files of AwA2.

    Attributes
    ----------
    root : Path
    class_names : list of str
        In ``classes.txt`` order (names keep their '+').
    predicate_names : list of str
    binary : ndarray of shape (n_classes, n_predicates), dtype uint8
    train_classes, test_classes : list of str
        The official zero-shot seen/unseen split.
    """

    root: Path
    class_names: list[str]
    predicate_names: list[str]
    binary: np.ndarray
    train_classes: list[str]
    test_classes: list[str]


def _read_names(path: Path) -> list[str]:
    names = read_pairs(path)
    if list(names) != list(range(1, len(names) + 1)):
        raise DataFormatError(f"{path}: ids must be 1..N in order")
    out = [names[i] for i in names]
    dup = sorted({n for n in out if out.count(n) > 1})
    if dup:
        raise DataFormatError(f"{path}: duplicated names {dup}")
    return out


def _read_list(path: Path, known: Sequence[str]) -> list[str]:
    with open(path, encoding="utf-8") as fh:
        names = [ln.strip() for ln in fh if ln.strip()]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise DataFormatError(f"{path}: classes not in classes.txt: {unknown}")
    return names


def load_awa2_metadata(
    root: str | os.PathLike | None = None, *, data_root: str | os.PathLike | None = None
) -> AwA2Metadata:
    """Read AwA2's class, predicate and class-predicate files.

    Parameters
    ----------
    root : path-like, optional
        The AwA2 folder (or a folder above ``Animals_with_Attributes2``); default
        ``<data_root>/awa2``.
    data_root : path-like, optional
        See :func:`cbm.data.common.resolve_data_root`.
    """
    base = find_dataset_dir(
        root,
        name="AwA2",
        candidates=["Animals_with_Attributes2", "awa2", "awa2/Animals_with_Attributes2"],
        marker="predicate-matrix-binary.txt",
        layout=AWA2_LAYOUT,
        data_root=data_root,
    )
    classes = _read_names(require_file(base / "classes.txt", AWA2_LAYOUT))
    predicates = _read_names(require_file(base / "predicates.txt", AWA2_LAYOUT))
    f_bin = base / "predicate-matrix-binary.txt"
    try:
        binary = np.loadtxt(f_bin, ndmin=2)
    except ValueError as err:
        raise DataFormatError(f"cannot parse {f_bin}: {err}") from err
    if binary.shape != (len(classes), len(predicates)):
        raise DataFormatError(f"{f_bin}: shape {binary.shape}, expected ({len(classes)}, {len(predicates)})")
    if not np.isin(binary, (0, 1)).all():
        raise DataFormatError(f"{f_bin}: values must be 0 or 1")
    train = _read_list(require_file(base / "trainclasses.txt", AWA2_LAYOUT), classes)
    test = _read_list(require_file(base / "testclasses.txt", AWA2_LAYOUT), classes)
    return AwA2Metadata(base, classes, predicates, binary.astype(np.uint8), train, test)


def load_awa2(
    root: str | os.PathLike | None = None,
    *,
    data_root: str | os.PathLike | None = None,
    classes: int | Sequence[int | str] | None = None,
    fractions: Sequence[float] = AWA2_FRACTIONS,
    seed: int = 0,
    check_images: bool = False,
    on_unreadable: str = "error",
) -> ImageFileTable:
    """Load the AwA2 images with their class-level predicates.

    Parameters
    ----------
    root, data_root : path-like, optional
        As in :func:`load_awa2_metadata`; the folder must also hold ``JPEGImages/``.
    classes : int or sequence, optional
        First N classes, or class names / 1-based ids, re-indexed in the order given.
    fractions : sequence of 3 floats
        Per-class train/val/test fractions of the images.
    seed : int
        Seed of the split.
    check_images, on_unreadable
        How unreadable images are found and handled: see :func:`cbm.data.tables.keep_readable`.

    Returns
    -------
    table : ImageFileTable
    """
    check_on_unreadable(on_unreadable)
    meta = load_awa2_metadata(root, data_root=data_root)
    img_dir = meta.root / "JPEGImages"
    if not img_dir.is_dir():
        raise DatasetLayoutError(
            f"missing folder {img_dir} (the AwA2 images, AwA2-data.zip)\nExpected layout:\n{AWA2_LAYOUT}"
        )
    paths: list[Path] = []
    y: list[int] = []
    for c, name in enumerate(meta.class_names):
        folder = img_dir / name
        if not folder.is_dir():
            raise DatasetLayoutError(
                f"missing image folder {folder} for class {name!r}\nExpected layout:\n{AWA2_LAYOUT}"
            )
        files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        if not files:
            raise DataFormatError(f"class {name!r} has no images in {folder}")
        paths += files
        y += [c] * len(files)
    info: dict[str, Any] = {
        "root": str(meta.root),
        "seed": seed,
        "fractions": list(fractions),
        "concept_source": "predicate-matrix-binary",
        "zero_shot_train_classes": meta.train_classes,
        "zero_shot_test_classes": meta.test_classes,
    }
    keep = keep_readable(paths, info, check_images=check_images, on_unreadable=on_unreadable)
    paths = [p for p, k in zip(paths, keep, strict=True) if k]
    y_arr = np.asarray(y, dtype=np.int64)[keep]
    split = stratified_split(y_arr, fractions, ("train", "val", "test"), seed)
    check_training_images(split, y_arr, meta.class_names)
    table = ImageFileTable(
        name="awa2",
        sample_ids=[f"{p.parent.name}/{p.name}" for p in paths],
        y=y_arr,
        concepts=meta.binary[y_arr],
        split=split,
        class_names=meta.class_names,
        concept_names=meta.predicate_names,
        class_concepts=meta.binary,
        concept_groups=None,
        info=info,
        paths=[str(p) for p in paths],
    )
    if classes is not None:
        ids = list(range(1, len(meta.class_names) + 1))
        table = table.subset_classes(select_classes(ids, meta.class_names, classes))
        table.info["classes"] = table.class_names
    return table
