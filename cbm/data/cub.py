"""CUB-200-2011 with the 112 concepts of Koh et al. (2020).

The concept set is always Koh et al.'s 112 attributes (:data:`KOH_112_ATTRIBUTE_INDICES`, their
published zero-based indices into the 312 CUB attributes); the names come from
``attributes.txt``. Class-level concept values, copied to every image of the class:

* ``image_majority_vote`` (when ``attributes/image_attribute_labels.txt`` is present): for each
  class and attribute, a majority vote over the class's *official training* images, skipping the
  labels marked "not visible" (certainty 1) that say the attribute is absent, exactly as Koh et
  al.'s code does; ties (including no votes) count as present. The selection is then re-derived
  (attributes present in at least 10 classes) and checked against the pinned list.
* ``class_continuous_threshold`` (fallback, e.g. the shared subset that lacks the per-image file):
  ``attributes/class_attribute_labels_continuous.txt`` >= 50 % on the 112 columns. A warning is
  logged and the table's ``info["concept_source"]`` records it so results say so.

Splits: the official train/test flag, and a seeded, stratified fraction (20 %) of the official
training images as validation.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .common import (
    DataFormatError,
    DatasetLayoutError,
    check_training_images,
    check_unique,
    find_dataset_dir,
    read_pairs,
    require_file,
    select_classes,
    stratified_split,
)
from .tables import ImageFileTable, check_images_readable, check_on_unreadable

__all__ = [
    "KOH_112_ATTRIBUTE_INDICES",
    "KOH_MIN_CLASS_COUNT",
    "CUB_LAYOUT",
    "CUBTable",
    "load_cub",
    "koh_selection",
    "class_majority_vote",
]

log = logging.getLogger(__name__)

#: Koh et al. (2020)'s 112 CUB concepts: zero-based indices into the 312 attributes of
#: ``attributes.txt`` (attribute id = index + 1), in their concept order.
KOH_112_ATTRIBUTE_INDICES: tuple[int, ...] = (
    1, 4, 6, 7, 10, 14, 15, 20, 21, 23, 25, 29, 30, 35, 36, 38, 40, 44, 45, 50, 51, 53, 54, 56,
    57, 59, 63, 64, 69, 70, 72, 75, 80, 84, 90, 91, 93, 99, 101, 106, 110, 111, 116, 117, 119,
    125, 126, 131, 132, 134, 145, 149, 151, 152, 153, 157, 158, 163, 164, 168, 172, 178, 179, 181,
    183, 187, 188, 193, 194, 196, 198, 202, 203, 208, 209, 211, 212, 213, 218, 220, 221, 225, 235,
    236, 238, 239, 240, 242, 243, 244, 249, 253, 254, 259, 260, 262, 268, 274, 277, 283, 289, 292,
    293, 294, 298, 299, 304, 305, 308, 309, 310, 311,
)  # fmt: skip

#: An attribute is kept when it is present (class level) in at least this many classes.
KOH_MIN_CLASS_COUNT = 10

#: Threshold (percent) on the continuous class-level file in the fallback.
CONTINUOUS_THRESHOLD = 50.0

N_CUB_ATTRIBUTES = 312

CUB_LAYOUT = """\
  CUB_200_2011/
    images/<NNN.Class_Name>/<file>.jpg
    images.txt                  <image_id> <relative path under images/>
    image_class_labels.txt      <image_id> <class_id>
    train_test_split.txt        <image_id> <1 = train, 0 = test>
    classes.txt                 <class_id> <NNN.Class_Name>
    attributes.txt              <attribute_id> <name>  (here, in attributes/, or next to CUB_200_2011/)
    attributes/image_attribute_labels.txt            (optional; per-image labels)
    attributes/class_attribute_labels_continuous.txt (used when the per-image file is absent)
(see datasets/cub/README.md)"""


class CUBTable(ImageFileTable):
    """CUB-200-2011 images with Koh et al.'s 112 class-level concepts.

    Extra attributes: ``class_ids`` (official 1-based class id per class) and
    ``attribute_indices`` (the 112 zero-based CUB attribute indices, concept order).
    """

    class_ids: list[int]
    attribute_indices: tuple[int, ...]

    def subset_classes(self, positions: Sequence[int]) -> CUBTable:
        new = super().subset_classes(positions)
        new.class_ids = [self.class_ids[p] for p in positions]
        return new  # type: ignore[return-value]


def _find_attributes_txt(cub_dir: Path) -> Path:
    for cand in (
        cub_dir / "attributes.txt",
        cub_dir / "attributes" / "attributes.txt",
        cub_dir.parent / "attributes.txt",
    ):
        if cand.is_file():
            return cand
    raise DatasetLayoutError(
        f"missing attributes.txt: looked in {cub_dir}, {cub_dir / 'attributes'} and "
        f"{cub_dir.parent}.\nExpected layout:\n{CUB_LAYOUT}"
    )


def _read_attribute_names(path: Path) -> list[str]:
    names = read_pairs(path)
    ids = list(names)
    if ids != list(range(1, len(ids) + 1)):
        raise DataFormatError(f"{path}: attribute ids must be 1..N in order")
    if len(ids) < max(KOH_112_ATTRIBUTE_INDICES) + 1:
        raise DataFormatError(
            f"{path}: {len(ids)} attributes, but Koh's indices need {max(KOH_112_ATTRIBUTE_INDICES) + 1}"
        )
    return [names[i] for i in ids]


def read_image_attribute_labels(path: Path) -> pd.DataFrame:
    """Read ``image_attribute_labels.txt`` (``<image> <attribute> <present> <certainty> ...``).

    Returns a frame with int columns ``image_id``, ``attribute_id``, ``is_present``,
    ``certainty_id``. Extra trailing fields (a few lines of the official file have one) are
    ignored.
    """
    cols = ["image_id", "attribute_id", "is_present", "certainty_id"]
    try:
        df = pd.read_csv(
            path, sep=r"\s+", header=None, names=list(range(6)), usecols=[0, 1, 2, 3], engine="c"
        )
    except Exception:  # irregular lines: parse the first four fields of each line
        rows = []
        with open(path, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                parts = line.split()
                if not parts:
                    continue
                if len(parts) < 4:
                    raise DataFormatError(f"{path}:{lineno}: expected at least 4 fields") from None
                try:
                    rows.append([int(float(v)) for v in parts[:4]])
                except ValueError as err:
                    raise DataFormatError(f"{path}:{lineno}: cannot parse {line!r}") from err
        df = pd.DataFrame(rows, columns=cols)
    df.columns = cols
    if df.isna().any().any():
        bad = int(np.flatnonzero(df.isna().any(axis=1).to_numpy())[0]) + 1
        raise DataFormatError(f"{path}:{bad}: expected at least 4 fields")
    df = df.astype(np.int64)
    key = df["image_id"].to_numpy() * 10_000 + df["attribute_id"].to_numpy()
    uniq, counts = np.unique(key, return_counts=True)
    if (counts > 1).any():
        k = int(uniq[np.argmax(counts > 1)])
        raise DataFormatError(f"{path}: duplicated (image_id, attribute_id) = ({k // 10_000}, {k % 10_000})")
    return df


def class_majority_vote(
    labels: pd.DataFrame,
    image_class: dict[int, int],
    train_images: set[int],
    n_classes: int,
    n_attributes: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Koh et al.'s class-level attribute labels from per-image labels.

    Only training images vote; a label that says "absent" with certainty 1 ("not visible") is
    skipped; ties (also zero votes) count as present.

    Parameters
    ----------
    labels : DataFrame
        From :func:`read_image_attribute_labels`.
    image_class : dict
        Image id -> class id (1-based).
    train_images : set of int
        Ids of the images that vote.
    n_classes, n_attributes : int
        Sizes of the output (class id c -> row c - 1, attribute id a -> column a - 1).

    Returns
    -------
    values : ndarray of shape (n_classes, n_attributes), dtype uint8
        Class-level labels.
    voted : ndarray of shape (n_classes,), dtype bool
        Whether the class had any voting image.
    """
    img = labels["image_id"].to_numpy()
    keep = np.isin(img, np.fromiter(train_images, dtype=np.int64))
    img = img[keep]
    attr = labels["attribute_id"].to_numpy()[keep] - 1
    present = labels["is_present"].to_numpy()[keep].clip(0, 1)
    certainty = labels["certainty_id"].to_numpy()[keep]
    lut = np.zeros(max(image_class) + 1, dtype=np.int64)
    lut[list(image_class)] = list(image_class.values())
    cls = lut[img] - 1
    vote = ~((present == 0) & (certainty == 1))
    counts = np.zeros((n_classes, n_attributes, 2), dtype=np.int64)
    np.add.at(counts, (cls[vote], attr[vote], present[vote]), 1)
    values = (counts[:, :, 1] >= counts[:, :, 0]).astype(np.uint8)
    voted = np.zeros(n_classes, dtype=bool)
    voted[np.unique(cls)] = True
    return values, voted


def koh_selection(class_values: np.ndarray, min_class_count: int = KOH_MIN_CLASS_COUNT) -> list[int]:
    """Attributes present (class level) in at least ``min_class_count`` classes (0-based)."""
    return np.flatnonzero(class_values.sum(axis=0) >= min_class_count).tolist()


def _check_selection(class_values: np.ndarray) -> None:
    derived = set(koh_selection(class_values))
    pinned = set(KOH_112_ATTRIBUTE_INDICES)
    if derived != pinned:
        raise DataFormatError(
            "the attributes present in >= "
            f"{KOH_MIN_CLASS_COUNT} classes differ from Koh et al.'s pinned 112: only derived "
            f"{sorted(derived - pinned)}, only pinned {sorted(pinned - derived)} "
            "(0-based attribute indices). Check image_attribute_labels.txt and the split."
        )


def load_cub(
    root: str | os.PathLike | None = None,
    *,
    data_root: str | os.PathLike | None = None,
    classes: int | Sequence[int | str] | None = None,
    val_fraction: float = 0.2,
    seed: int = 0,
    concept_source: str = "auto",
    check_koh_selection: bool | None = None,
    check_images: bool = False,
    on_unreadable: str = "error",
) -> CUBTable:
    """Load CUB-200-2011 from its official layout.

    Parameters
    ----------
    root : path-like, optional
        The ``CUB_200_2011`` folder or a folder above it; default: ``<data_root>/cub``.
    data_root : path-like, optional
        See :func:`cbm.data.common.resolve_data_root`.
    classes : int or sequence, optional
        Class subset: ``N`` for the first N classes that have images (e.g. 20 for CUB-20), or a
        list of official class ids / names (``"001.Black_footed_Albatross"`` or
        ``"Black_footed_Albatross"``); labels are re-indexed in that order. Class-level values
        and the validation split are computed before subsetting, so they do not depend on it.
    val_fraction : float
        Fraction of each class's official training images held out for validation.
    seed : int
        Seed of the validation split.
    concept_source : {"auto", "image_majority_vote", "class_continuous_threshold"}
        ``auto`` uses the per-image file when present, else the continuous fallback.
    check_koh_selection : bool, optional
        Re-derive the selection from the majority vote and compare with the pinned list. Default:
        when the per-image labels are used and every class in ``classes.txt`` has training
        images (the full data set).
    check_images : bool
        Decode every image up front (otherwise a bad file fails when loaded).
    on_unreadable : {"error", "skip"}
        With ``"skip"``, images are checked up front and unreadable ones are dropped and counted
        in ``info["skipped_images"]``.

    Returns
    -------
    table : CUBTable
    """
    check_on_unreadable(on_unreadable)
    if concept_source not in ("auto", "image_majority_vote", "class_continuous_threshold"):
        raise ValueError(f"unknown concept_source {concept_source!r}")
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")

    cub = find_dataset_dir(
        root,
        name="CUB-200-2011",
        candidates=["CUB_200_2011", "cub/CUB_200_2011", "cub"],
        marker="images.txt",
        layout=CUB_LAYOUT,
        data_root=data_root,
    )
    images_dir = cub / "images"
    if not images_dir.is_dir():
        raise DatasetLayoutError(f"missing folder {images_dir}\nExpected layout:\n{CUB_LAYOUT}")
    f_images = require_file(cub / "images.txt", CUB_LAYOUT)
    f_labels = require_file(cub / "image_class_labels.txt", CUB_LAYOUT)
    f_split = require_file(cub / "train_test_split.txt", CUB_LAYOUT)
    f_classes = require_file(cub / "classes.txt", CUB_LAYOUT)
    f_attr = _find_attributes_txt(cub)

    images = read_pairs(f_images)
    labels = read_pairs(f_labels, int)
    is_train = read_pairs(f_split, int)
    class_table = read_pairs(f_classes)
    attr_names = _read_attribute_names(f_attr)
    n_attr = len(attr_names)

    ids = list(images)
    for other, path in ((labels, f_labels), (is_train, f_split)):
        missing = [i for i in ids if i not in other]
        extra = [i for i in other if i not in images]
        if missing or extra:
            raise DataFormatError(
                f"{path} and {f_images} list different image ids: absent from {path.name}: "
                f"{missing[:10]}, absent from images.txt: {extra[:10]}"
            )
    bad_flags = sorted({v for v in is_train.values()} - {0, 1})
    if bad_flags:
        raise DataFormatError(f"{f_split}: train flags must be 0/1, found {bad_flags}")
    unknown = sorted({labels[i] for i in ids} - set(class_table))
    if unknown:
        raise DataFormatError(f"{f_labels}: class ids not in {f_classes}: {unknown[:10]}")
    class_ids_all = list(class_table)
    if class_ids_all != list(range(1, len(class_ids_all) + 1)):
        raise DataFormatError(f"{f_classes}: class ids must be 1..N in order")
    check_unique([images[i] for i in ids], "image paths", f_images)

    paths = [images_dir / images[i] for i in ids]
    absent = [str(p) for p in paths if not p.is_file()]
    if absent:
        raise DatasetLayoutError(
            f"{len(absent)} image(s) listed in {f_images} are missing, e.g. {absent[:3]}"
        )
    info: dict[str, Any] = {"root": str(cub), "seed": seed, "val_fraction": val_fraction}
    if on_unreadable == "skip" or check_images:
        keep, bad = check_images_readable([str(p) for p in paths], on_unreadable)
        ids = [i for i, k in zip(ids, keep, strict=True) if k]
        paths = [p for p, k in zip(paths, keep, strict=True) if k]
        info["skipped_images"] = bad
        info["n_skipped_images"] = len(bad)

    # ---- class-level attribute values over all classes of classes.txt ----------------------
    n_classes_all = len(class_ids_all)
    f_img_attr = cub / "attributes" / "image_attribute_labels.txt"
    use_images = concept_source == "image_majority_vote" or (
        concept_source == "auto" and f_img_attr.is_file()
    )
    if use_images:
        require_file(f_img_attr, CUB_LAYOUT, "per-image attribute labels")
        per_image = read_image_attribute_labels(f_img_attr)
        bad_attr = per_image["attribute_id"].to_numpy()
        if bad_attr.min() < 1 or bad_attr.max() > n_attr:
            raise DataFormatError(f"{f_img_attr}: attribute ids outside 1..{n_attr}")
        train_ids = {i for i in ids if is_train[i] == 1}
        no_labels = sorted(train_ids - set(np.unique(per_image["image_id"]).tolist()))
        if no_labels:
            raise DataFormatError(f"{f_img_attr}: no labels for training image ids {no_labels[:10]}")
        class_values, voted = class_majority_vote(
            per_image, {i: labels[i] for i in ids}, train_ids, n_classes_all, n_attr
        )
        if check_koh_selection is None:
            check_koh_selection = bool(voted.all())
        if check_koh_selection:
            _check_selection(class_values)
        info["concept_source"] = "image_majority_vote"
    else:
        if check_koh_selection:
            raise ValueError("check_koh_selection needs attributes/image_attribute_labels.txt")
        f_cont = require_file(
            cub / "attributes" / "class_attribute_labels_continuous.txt",
            CUB_LAYOUT,
            "class-level attribute file (needed when image_attribute_labels.txt is absent)",
        )
        try:
            cont = np.loadtxt(f_cont, dtype=np.float64, ndmin=2)
        except ValueError as err:
            raise DataFormatError(f"cannot parse {f_cont}: {err}") from err
        if cont.shape != (n_classes_all, n_attr):
            raise DataFormatError(
                f"{f_cont}: shape {cont.shape}, expected ({n_classes_all}, {n_attr}) "
                "(classes.txt x attributes.txt)"
            )
        class_values = (cont >= CONTINUOUS_THRESHOLD).astype(np.uint8)
        log.warning(
            "CUB: %s; class-level concepts come from %s >= %g%% "
            "(concept_source=class_continuous_threshold), an approximation of Koh et al.'s "
            "majority vote",
            f"{f_img_attr} is absent" if not f_img_attr.is_file() else "fallback requested",
            f_cont.name,
            CONTINUOUS_THRESHOLD,
        )
        info["concept_source"] = "class_continuous_threshold"
        check_koh_selection = False
    info["koh_selection_checked"] = bool(check_koh_selection)

    # ---- the table over the classes that have images ---------------------------------------
    koh = list(KOH_112_ATTRIBUTE_INDICES)
    present_ids = sorted({labels[i] for i in ids})
    pos_of = {c: p for p, c in enumerate(present_ids)}
    y = np.array([pos_of[labels[i]] for i in ids], dtype=np.int64)
    full_names = [class_table[c] for c in present_ids]
    short_names = [n.split(".", 1)[1] if "." in n else n for n in full_names]
    class_concepts = class_values[np.asarray(present_ids) - 1][:, koh]
    flag = np.array([is_train[i] for i in ids])
    split = np.where(flag == 1, "train", "test").astype("<U5")
    check_training_images(split, y, short_names)
    train_idx = np.flatnonzero(flag == 1)
    if val_fraction > 0:
        split[train_idx] = stratified_split(
            y[train_idx], (1 - val_fraction, val_fraction), ("train", "val"), seed
        )
    concept_names = [attr_names[a] for a in koh]
    groups: dict[str, list[int]] = {}
    for j, name in enumerate(concept_names):
        groups.setdefault(name.split("::", 1)[0], []).append(j)

    table = CUBTable(
        name="cub",
        sample_ids=[str(i) for i in ids],
        y=y,
        concepts=class_concepts[y],
        split=split,
        class_names=short_names,
        concept_names=concept_names,
        class_concepts=class_concepts,
        concept_groups=groups,
        info=info,
        paths=[str(p) for p in paths],
    )
    table.class_ids = present_ids
    table.attribute_indices = KOH_112_ATTRIBUTE_INDICES
    if classes is not None:
        aliases = {n: p for p, n in enumerate(full_names)}
        positions = select_classes(present_ids, short_names, classes, aliases)
        table = table.subset_classes(positions)
        info = table.info
        info["classes"] = [table.class_names[i] for i in range(table.n_classes)]
    return table
