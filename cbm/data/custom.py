"""Your own images: a folder per class and a CSV of binary concepts, per class or per image.

The layout (documented in ``datasets/custom/README.md``)::

    <folder>/
      images/<class>/<file>.{jpg,jpeg,png,...}   one sub-folder per class (its name is the class)
      concepts.csv                               first column ``class`` (one row per class) or
                                                 ``image`` (one row per image, its path below
                                                 images/), then one 0/1 column per concept;
                                                 per image, an optional ``split`` column
                                                 (train / val / test)

Concept names of the form ``group::value`` define concept groups (as in CUB and the synthetic
world). Without a ``split`` column the images of each class are split 60/20/20 (seeded). Every
problem is raised with the file, line and column that cause it.
"""

from __future__ import annotations

import csv
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .common import (
    UTF8_FIX,
    DataFormatError,
    DatasetLayoutError,
    check_training_images,
    find_dataset_dir,
    not_utf8,
    stratified_split,
)
from .tables import ImageFileTable, check_on_unreadable, keep_readable

__all__ = ["CUSTOM_LAYOUT", "IMAGE_SUFFIXES", "load_custom"]

log = logging.getLogger(__name__)

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp")
SPLIT_NAMES = ("train", "val", "test")

CUSTOM_LAYOUT = """\
  <folder>/                      (or <data_root>/custom/)
    images/<class>/<file>.png    one sub-folder of images per class (.jpg .jpeg .png .bmp .gif .tif .webp)
    concepts.csv                 class,<concept>,...   one row per class, values 0/1
                            or   image,<concept>,...[,split]   one row per image (path below images/)
(see datasets/custom/README.md)"""


def _read_csv(path: Path) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """Header and (line number, fields) of the non-empty rows; whitespace around fields removed."""
    with open(path, newline="", encoding="utf-8-sig") as fh:
        reader = csv.reader(fh)
        try:
            lines = [(n, [f.strip() for f in row]) for n, row in enumerate(reader, 1) if any(row)]
        except UnicodeDecodeError as err:
            raise not_utf8(path, err) from err
        except csv.Error as err:  # e.g. a field over csv.field_size_limit()
            raise DataFormatError(f"{path}:{reader.line_num}: not a readable CSV line ({err})") from err
    if any("\x00" in f for _, row in lines for f in row):
        raise DataFormatError(f"{path} holds NUL bytes, so it is not UTF-8 text (UTF-16?): {UTF8_FIX}")
    if not lines:
        raise DataFormatError(f"{path} is empty")
    (_, header), rows = lines[0], lines[1:]
    for n, row in rows:
        if len(row) != len(header):
            raise DataFormatError(f"{path}:{n}: {len(row)} fields, the header has {len(header)}")
    return header, rows


def _concepts(path: Path, header: list[str], rows: list[tuple[int, list[str]]],
              cols: list[int]) -> np.ndarray:
    names = [header[c] for c in cols]
    out = np.zeros((len(rows), len(cols)), dtype=np.uint8)
    for i, (n, row) in enumerate(rows):
        for j, c in enumerate(cols):
            if row[c] not in ("0", "1"):
                raise DataFormatError(f"{path}:{n}: concept {names[j]!r} is {row[c]!r} (must be 0 or 1)")
            out[i, j] = row[c] == "1"
    return out


def _groups(names: Sequence[str]) -> dict[str, list[int]] | None:
    """``group::value`` names -> {group: concept indices}; None when any name has no group."""
    if not all("::" in n for n in names):
        return None
    groups: dict[str, list[int]] = {}
    for j, n in enumerate(names):
        groups.setdefault(n.split("::", 1)[0], []).append(j)
    if "" in groups:
        log.warning("concept(s) %s have an empty group name (nothing before '::'): they form a group "
                    "named ''", [names[j] for j in groups[""]][:5])
    return groups


def _warn_identical_profiles(classes: Sequence[str], profiles: np.ndarray) -> None:
    """Warn when classes share a concept profile: a head on the concepts cannot tell them apart."""
    seen: dict[bytes, str] = {}
    same = []
    for c, row in zip(classes, np.asarray(profiles, dtype=np.uint8), strict=True):
        if row.tobytes() in seen:
            same.append((seen[row.tobytes()], c))
        seen.setdefault(row.tobytes(), c)
    if same:
        log.warning("%d pair(s) of classes have the same concept profile, e.g. %s: a head that reads "
                    "only the concepts cannot tell them apart", len(same), same[:3])


def _images(root: Path) -> tuple[list[str], dict[str, list[Path]]]:
    folder = root / "images"
    if not folder.is_dir():
        raise DatasetLayoutError(f"missing folder {folder}\nExpected layout:\n{CUSTOM_LAYOUT}")
    classes = sorted(p.name for p in folder.iterdir() if p.is_dir())
    # regular files only: a FIFO named *.png hung the image check, a folder named so failed it
    files = {c: sorted(p for p in (folder / c).rglob("*")
                       if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file()) for c in classes}
    empty = [c for c in classes if not files[c]]
    if empty or len(classes) < 2:
        raise DataFormatError(f"{folder}: need two or more class folders holding images; "
                              f"{'no images in ' + str(empty) if empty else f'found {classes}'}")
    return classes, files


def load_custom(
    root: str | os.PathLike | None = None,
    *,
    data_root: str | os.PathLike | None = None,
    fractions: Sequence[float] = (0.6, 0.2, 0.2),
    seed: int = 0,
    check_images: bool = False,
    on_unreadable: str = "error",
) -> ImageFileTable:
    """Load an image folder with a concepts CSV (layout in the module docstring).

    Parameters
    ----------
    root : path-like, optional
        The folder holding ``concepts.csv`` and ``images/``; default ``<data_root>/custom``.
    data_root : path-like, optional
        See :func:`cbm.data.common.resolve_data_root`.
    fractions : sequence of 3 floats
        Per-class train/val/test fractions, used when ``concepts.csv`` has no ``split`` column.
    seed : int
        Seed of that split.
    check_images, on_unreadable
        How unreadable images are found and handled: see :func:`cbm.data.tables.keep_readable`.

    Returns
    -------
    table : ImageFileTable
        Classes in sorted folder-name order; ``class_concepts`` are the per-class rows, or per
        image the majority value of each concept over the class's images (ties: 1).

    Raises
    ------
    DatasetLayoutError
        No ``concepts.csv`` or ``images/`` folder (the expected layout is shown).
    DataFormatError
        A malformed CSV (file and line named): an unknown first column, a value other than 0/1, a
        class or image listed twice or missing from the CSV, a row naming an absent class or image,
        a bad split name, duplicated concept names, fewer than two classes, a class without
        training images.
    """
    check_on_unreadable(on_unreadable)
    base = find_dataset_dir(root, name="custom", candidates=["custom"], marker="concepts.csv",
                            layout=CUSTOM_LAYOUT, data_root=data_root)
    csv_path = base / "concepts.csv"
    header, rows = _read_csv(csv_path)
    kind = header[0]
    if kind not in ("class", "image"):
        raise DataFormatError(f"{csv_path}:1: the first column must be 'class' (a row per class) or 'image' "
                              f"(a row per image), got {kind!r}")
    split_col = header.index("split") if kind == "image" and "split" in header else None
    cols = [c for c in range(1, len(header)) if c != split_col]
    names = [header[c] for c in cols]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup or not names or "" in names:
        raise DataFormatError(f"{csv_path}:1: concept names must be non-empty and unique; "
                              f"{'duplicated: ' + str(dup) if dup else 'got ' + str(names)}")
    classes, files = _images(base)
    values = _concepts(csv_path, header, rows, cols)
    paths = [p for c in classes for p in files[c]]
    y = np.array([k for k, c in enumerate(classes) for _ in files[c]], dtype=np.int64)
    rel = [p.relative_to(base / "images").as_posix() for p in paths]
    key = classes if kind == "class" else rel
    where = {v: i for i, v in enumerate(key)}
    listed: dict[str, int] = {}
    for i, (n, row) in enumerate(rows):
        if row[0] not in where:
            raise DataFormatError(f"{csv_path}:{n}: {kind} {row[0]!r} is not in {base / 'images'}")
        if row[0] in listed:
            raise DataFormatError(f"{csv_path}:{n}: {kind} {row[0]!r} is listed twice")
        listed[row[0]] = i
    missing = [v for v in key if v not in listed]
    if missing:
        raise DataFormatError(f"{csv_path}: no row for {len(missing)} {kind}(s) of images/, "
                              f"e.g. {missing[:5]}")
    if kind == "class":
        class_concepts = values[[listed[c] for c in classes]]
        concepts = class_concepts[y]
    else:
        concepts = values[[listed[r] for r in rel]]
        class_concepts = np.stack([concepts[y == k].mean(axis=0) >= 0.5 for k in range(len(classes))])
    _warn_identical_profiles(classes, class_concepts)
    info: dict[str, Any] = {"root": str(base), "seed": seed, "concept_source": f"per_{kind}"}
    if split_col is not None:
        given = [rows[listed[r]][1][split_col] for r in rel]
        bad = sorted(set(given) - set(SPLIT_NAMES))  # checked before the names are stored as <U5
        if bad:
            raise DataFormatError(f"{csv_path}: split values {bad}; allowed: {list(SPLIT_NAMES)}")
        split = np.array(given, dtype="<U5")
    else:
        split = stratified_split(y, fractions, SPLIT_NAMES, seed)
        info["fractions"] = list(fractions)
    keep = keep_readable(paths, info, check_images=check_images, on_unreadable=on_unreadable)
    paths, rel = ([v for v, k in zip(a, keep, strict=True) if k] for a in (paths, rel))
    y, concepts, split = y[keep], concepts[keep], split[keep]
    check_training_images(split, y, classes)
    return ImageFileTable(name="custom", sample_ids=rel, y=y, concepts=concepts, split=split,
                          class_names=classes, concept_names=names, class_concepts=class_concepts,
                          concept_groups=_groups(names), info=info, paths=[str(p) for p in paths])
