"""Check data files before a long job: ``python -m cbm.data.validate PATH [PATH ...]``.

A PATH may be

* a concept table ``<split>.npz`` (the format ``fit-head`` reads, :mod:`cbm.data.concept_tables`);
* a ``concepts/`` folder or a run directory: every ``*.npz`` table in it, and that they share
  concept and class names;
* a custom data set folder (``concepts.csv`` + ``images/``, :mod:`cbm.data.custom`): every image
  decoded, and the train / val / test splits checked as ``train-detector`` checks them.

Each PATH prints ``OK <path>: <summary>`` or ``FAIL <path>: <what is wrong>`` (the first problem
found, with the file, row and column or concept that cause it); the exit status is 1 when any
failed.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .common import DataFormatError, DatasetLayoutError, check_split_sizes
from .concept_tables import load_concept_table, load_concept_tables
from .custom import load_custom

__all__ = ["main", "validate_path"]


def validate_path(path: str | os.PathLike) -> str:
    """Validate one PATH (see the module docstring) and return a one-line summary.

    Raises
    ------
    FileNotFoundError
        The path does not exist, or holds neither concept tables nor a custom data set.
    ValueError
        Invalid content (:class:`~cbm.data.common.DataFormatError` for a custom data set); the message
        names the file and the row, column or concept at fault.
    """
    path = Path(path)
    if path.is_file():
        t = load_concept_table(path)
        return (f"concept table {t.split!r}: {t.n_samples} rows, {t.n_concepts} concepts, "
                f"{len(t.class_names)} classes (schema version 1)")
    if not path.is_dir():
        raise FileNotFoundError(f"{path} does not exist")
    if (path / "concepts.csv").is_file():
        tab = load_custom(path, check_images=True)
        splits = {s: int((tab.split == s).sum()) for s in ("train", "val", "test")}
        check_split_sizes(splits)  # what train-detector refuses (its default export_splits), in its words
        groups = f"{len(tab.concept_groups)} concept groups" if tab.concept_groups else "no concept groups"
        return (f"custom data set: {len(tab)} images, {tab.n_classes} classes, {tab.n_concepts} concepts "
                f"({groups}), concepts {tab.info['concept_source'].replace('_', ' ')}, splits {splits}")
    folder = path / "concepts" if (path / "concepts").is_dir() else path
    splits = sorted(p.stem for p in folder.glob("*.npz") if p.is_file())  # a FIFO would hang the read
    if not splits:
        raise FileNotFoundError(f"{path} holds no concept tables (*.npz, concepts/*.npz) and no concepts.csv")
    tables = load_concept_tables(folder, splits)
    rows = ", ".join(f"{s} {t.n_samples}" for s, t in tables.items())
    first = next(iter(tables.values()))
    classes = np.unique(np.concatenate([t.y for t in tables.values()])).size
    return (f"{len(tables)} concept tables ({rows} rows), {first.n_concepts} concepts, {classes} of "
            f"{len(first.class_names)} classes present, same names in every table")


def main(argv: Sequence[str] | None = None) -> int:
    """Validate each PATH; print one line per PATH; return 1 when any failed."""
    parser = argparse.ArgumentParser(prog="python -m cbm.data.validate", description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", help="concept table, concepts/ folder, run or custom data folder")
    args = parser.parse_args(argv)
    failed = 0
    for p in args.paths:
        try:
            print(f"OK {p}: {validate_path(p)}")
        except (OSError, ValueError, DataFormatError, DatasetLayoutError) as err:  # OSError: unreadable image
            failed += 1
            print(f"FAIL {p}: {err}")
    return int(failed > 0)


if __name__ == "__main__":
    sys.exit(main())
