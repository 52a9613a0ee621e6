"""CUB-200-2011 attributes: Koh et al. (2020)'s 112-concept selection and its class-level values.

The pinned selection (:data:`KOH_112_ATTRIBUTE_INDICES`), the attribute-name and per-image label
readers, and the class-level majority vote over training images that Koh et al.'s code uses
(:func:`class_majority_vote`), with the re-derivation check of the selection (:func:`koh_selection`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .common import (
    DataFormatError,
    DatasetLayoutError,
    read_pairs,
)

__all__ = [
    "CONTINUOUS_THRESHOLD",
    "CUB_LAYOUT",
    "KOH_112_ATTRIBUTE_INDICES",
    "KOH_MIN_CLASS_COUNT",
    "N_CUB_ATTRIBUTES",
    "check_selection",
    "class_majority_vote",
    "find_attributes_txt",
    "koh_selection",
    "read_attribute_names",
    "read_image_attribute_labels",
]

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

#: The expected folder layout, quoted in errors.
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

def find_attributes_txt(cub_dir: Path) -> Path:
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


def read_attribute_names(path: Path) -> list[str]:
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


def check_selection(class_values: np.ndarray) -> None:
    derived = set(koh_selection(class_values))
    pinned = set(KOH_112_ATTRIBUTE_INDICES)
    if derived != pinned:
        raise DataFormatError(
            "the attributes present in >= "
            f"{KOH_MIN_CLASS_COUNT} classes differ from Koh et al.'s pinned 112: only derived "
            f"{sorted(derived - pinned)}, only pinned {sorted(pinned - derived)} "
            "(0-based attribute indices). Check image_attribute_labels.txt and the split."
        )
