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
from typing import Any

import numpy as np

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
from .cub_attributes import (
    CONTINUOUS_THRESHOLD,
    CUB_LAYOUT,
    KOH_112_ATTRIBUTE_INDICES,
    check_selection,
    class_majority_vote,
    find_attributes_txt,
    read_attribute_names,
    read_image_attribute_labels,
)
from .tables import ImageFileTable, check_images_readable, check_on_unreadable

__all__ = ["CUBTable", "load_cub"]

log = logging.getLogger(__name__)



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
    f_attr = find_attributes_txt(cub)

    images = read_pairs(f_images)
    labels = read_pairs(f_labels, int)
    is_train = read_pairs(f_split, int)
    class_table = read_pairs(f_classes)
    attr_names = read_attribute_names(f_attr)
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
            check_selection(class_values)
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
