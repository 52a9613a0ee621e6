"""Tables of the synthetic concept world: in memory, or written to and read from a folder.

The world itself (concept groups, class profiles, drawing) is in :mod:`cbm.data.synthetic_world`.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from .common import DataFormatError, DatasetLayoutError, stratified_split
from .synthetic_world import GROUPS, SyntheticWorld, make_world, render
from .tables import ArrayImageTable, ImageFileTable, SampleTable

__all__ = ["SyntheticTable", "make_synthetic", "write_synthetic", "load_synthetic"]

#: Version of the on-disk layout written by `write_synthetic`.
FORMAT_VERSION = 1

_GROUP_SIZES = [len(v) for v in GROUPS.values()]


class SyntheticTable(ArrayImageTable):
    """In-memory synthetic images; ``world`` holds the class profiles.

    ``heldout_classes`` are the class indices of the novel classes; ``anomalous_concepts`` maps
    each of them to the concept indices where it differs from its nearest seen class.
    """

    world: SyntheticWorld


class SyntheticFileTable(ImageFileTable):
    """Synthetic images read back from a folder written by :func:`write_synthetic`."""

    world: SyntheticWorld


def _heldout_info(world: SyntheticWorld) -> list[dict[str, Any]]:
    names = world.class_names
    cn = world.concept_names
    out = []
    for h in range(world.n_heldout):
        idx = world.anomalous_concepts(h)
        groups = [
            g
            for i, g in enumerate(world.groups)
            if world.profiles[world.n_seen + h, i] != world.profiles[world.nearest_seen[h], i]
        ]
        out.append(
            {
                "class": names[world.n_seen + h],
                "class_index": world.n_seen + h,
                "nearest_seen": names[world.nearest_seen[h]],
                "nearest_seen_index": int(world.nearest_seen[h]),
                "anomalous_groups": groups,
                "anomalous_concepts": [cn[i] for i in idx],
                "anomalous_concept_indices": idx,
            }
        )
    return out


def _attach(table: SampleTable, world: SyntheticWorld) -> None:
    table.world = world  # type: ignore[attr-defined]
    table.heldout_classes = list(range(world.n_seen, world.n_seen + world.n_heldout))  # type: ignore[attr-defined]
    table.anomalous_concepts = {  # type: ignore[attr-defined]
        world.n_seen + h: world.anomalous_concepts(h) for h in range(world.n_heldout)
    }


def _swap(profile: np.ndarray, rng: np.random.Generator, p_swap: float) -> None:
    """Give each group of ``profile`` (in place) another uniform value with probability ``p_swap``."""
    for g, k in enumerate(_GROUP_SIZES):
        if rng.random() < p_swap:
            profile[g] = (profile[g] + rng.integers(1, k)) % k


def make_synthetic(
    n_per_class: int = 120,
    *,
    n_classes: int = 20,
    n_heldout: int = 6,
    n_per_heldout_class: int | None = None,
    image_size: int = 64,
    seed: int = 0,
    fractions: Sequence[float] = (0.6, 0.2, 0.2),
    p_variation: float = 0.15,
    min_distance: int = 3,
    p_swap: float = 0.0,
    folder: str | os.PathLike | None = None,
) -> SyntheticTable:
    """Generate the synthetic concept world in memory (and optionally write it to a folder).

    Parameters
    ----------
    n_per_class : int
        Images per seen class (the default, 20 x 120 = 2,400 images, trains a small CNN in a
        few minutes on a CPU).
    n_classes, n_heldout : int
        Seen and held-out classes.
    n_per_heldout_class : int, optional
        Images per held-out class; default ``max(1, n_per_class // 2)``.
    image_size : int
        Image side in pixels.
    seed : int
        Seed of everything.
    fractions : sequence of 3 floats
        Per-class train/val/test fractions of the seen classes' images.
    p_variation, min_distance
        See :func:`make_world`.
    p_swap : float in [0, 0.5)
        Per-image attribute noise of the seen classes: each group of an image independently
        shows another value, drawn uniformly, with this probability (its concept labels follow
        the image). Values above 0 break the perfect co-occurrence of concepts within a class,
        so a detector must recognise each concept rather than the class, which open-world runs
        (held-out classes are new concept combinations) need. Held-out classes never swap.
    folder : path-like, optional
        Also write the images and labels there (see :func:`write_synthetic`).

    Returns
    -------
    table : SyntheticTable
    """
    if n_per_class < 1:
        raise ValueError("n_per_class must be >= 1")
    if image_size < 32:
        raise ValueError("image_size must be >= 32")
    if isinstance(p_swap, bool) or not isinstance(p_swap, int | float | np.integer | np.floating):
        raise TypeError(f"p_swap must be a number in [0, 0.5), got {type(p_swap).__name__} {p_swap!r}")
    p_swap = float(p_swap)
    if not 0.0 <= p_swap < 0.5:
        raise ValueError(f"p_swap must be in [0, 0.5), got {p_swap}")
    world = make_world(n_classes, n_heldout, seed, p_variation, min_distance)
    n_novel = max(1, n_per_class // 2) if n_per_heldout_class is None else n_per_heldout_class
    counts = [n_per_class] * world.n_seen + [n_novel] * world.n_heldout
    n = int(sum(counts))
    images = np.empty((n, image_size, image_size, 3), dtype=np.uint8)
    y = np.repeat(np.arange(len(counts)), counts)
    prof = np.empty((n, len(GROUPS)), dtype=np.int64)
    sample_ids = []
    i = 0
    for c, cnt in enumerate(counts):
        rng = np.random.default_rng([int(seed), 11, c, image_size])
        p_var = world.p_variation if c < world.n_seen else 0.0
        for j in range(cnt):
            p = world.profiles[c].copy()
            if rng.random() < p_var:
                p[world.variable_group[c]] = world.variable_value[c]
            if p_swap > 0.0 and c < world.n_seen:
                _swap(p, rng, p_swap)
            prof[i] = p
            images[i] = render(p, rng, image_size)
            sample_ids.append(f"{world.class_names[c]}/{j:05d}")
            i += 1
    split = np.full(n, "novel", dtype="<U5")
    seen = y < world.n_seen
    split[seen] = stratified_split(y[seen], fractions, ("train", "val", "test"), seed)
    table = SyntheticTable(
        name="synthetic",
        sample_ids=sample_ids,
        y=y,
        concepts=world.concepts_of(prof),
        split=split,
        class_names=world.class_names,
        concept_names=world.concept_names,
        class_concepts=world.class_concepts,
        concept_groups=world.concept_groups,
        info={
            "seed": seed,
            "concept_source": "synthetic_per_image",
            "n_per_class": n_per_class,
            "n_per_heldout_class": n_novel,
            "image_size": image_size,
            "fractions": list(fractions),
            "p_swap": p_swap,
            "heldout": _heldout_info(world),
        },
        images=images,
    )
    _attach(table, world)
    if folder is not None:
        write_synthetic(table, folder)
    return table


SYNTHETIC_LAYOUT = """\
  <folder>/
    world.json     class profiles, groups, held-out classes and their anomalous concepts
    samples.csv    sample_id,path,class_index,split,<one 0/1 column per concept>
    images/<class>/<NNNNN>.png"""


def write_synthetic(table: SampleTable, folder: str | os.PathLike) -> Path:
    """Write a synthetic table to ``folder`` (PNG images + ``samples.csv`` + ``world.json``).

    ``world.json`` is removed first and written last (atomically), so a write that fails or is
    interrupted leaves a folder that :func:`load_synthetic` refuses rather than a mix of two worlds.
    """
    world: SyntheticWorld | None = getattr(table, "world", None)
    if world is None:
        raise ValueError("write_synthetic needs a table made by make_synthetic")
    out = Path(folder)
    meta = json.dumps({
        "format_version": FORMAT_VERSION,
        "world": world.to_dict(),
        "class_names": table.class_names,
        "concept_names": table.concept_names,
        "info": table.info,
    }, indent=1)
    # world.json goes last: a folder whose write was interrupted has none and does not load
    (out / "world.json").unlink(missing_ok=True)
    (out / "images").mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(len(table)):
        rel = Path("images") / f"{table.sample_ids[i]}.png"
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.asarray(table.load(i))).save(out / rel, compress_level=1)
        rows.append(
            [table.sample_ids[i], rel.as_posix(), int(table.y[i]), table.split[i]]
            + table.concepts[i].tolist()
        )
    tmp = out / "samples.csv.tmp"
    with open(tmp, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["sample_id", "path", "class_index", "split", *table.concept_names])
        w.writerows(rows)
    os.replace(tmp, out / "samples.csv")
    tmp = out / "world.json.tmp"
    tmp.write_text(meta, encoding="utf-8")
    os.replace(tmp, out / "world.json")
    return out


def load_synthetic(folder: str | os.PathLike) -> SyntheticFileTable:
    """Read a folder written by :func:`write_synthetic` (images are decoded lazily)."""
    root = Path(folder)
    for f in ("world.json", "samples.csv"):
        if not (root / f).is_file():
            raise DatasetLayoutError(f"missing {root / f}\nExpected layout:\n{SYNTHETIC_LAYOUT}")
    meta = json.loads((root / "world.json").read_text(encoding="utf-8"))
    if meta.get("format_version") != FORMAT_VERSION:
        raise DataFormatError(f"{root / 'world.json'}: unsupported format_version")
    world = SyntheticWorld.from_dict(meta["world"])
    with open(root / "samples.csv", newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = next(reader)
        rows = list(reader)
    if header[4:] != meta["concept_names"]:
        raise DataFormatError(f"{root / 'samples.csv'}: concept columns differ from world.json")
    paths = [root / r[1] for r in rows]
    absent = [str(p) for p in paths if not p.is_file()]
    if absent:
        raise DatasetLayoutError(f"{len(absent)} image(s) missing, e.g. {absent[:3]}")
    table = SyntheticFileTable(
        name="synthetic",
        sample_ids=[r[0] for r in rows],
        y=np.array([int(r[2]) for r in rows], dtype=np.int64),
        concepts=np.array([[int(v) for v in r[4:]] for r in rows], dtype=np.uint8).reshape(
            len(rows), len(header) - 4
        ),
        split=np.array([r[3] for r in rows]),
        class_names=meta["class_names"],
        concept_names=meta["concept_names"],
        class_concepts=world.class_concepts,
        concept_groups=world.concept_groups,
        info={**meta["info"], "folder": str(root)},
        paths=[str(p) for p in paths],
    )
    _attach(table, world)
    return table
