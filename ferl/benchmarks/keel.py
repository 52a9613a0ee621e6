"""Loader for KEEL-style tabular data sets (paper §4.1, appendix G).

A file holds headerless comma-separated rows (blanks after commas skipped), the class label in
the last column. Feature columns whose every value parses as a number are numeric; columns whose
every value is a non-number string are one-hot encoded (categories in sorted order); a column
mixing the two, a row with a different number of fields, an empty field or a non-finite number
is an error naming the file and the line. Labels are encoded as ``0..C-1`` in sorted order of
their string form (numerically sorted when every label is a number).
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["KeelDataset", "default_data_root", "list_datasets", "load_keel"]


@dataclass(frozen=True)
class KeelDataset:
    """A loaded data set.

    Attributes
    ----------
    name : str
        File stem, e.g. ``"wine"``.
    X : ndarray of shape (n_samples, n_features), float64
        Features after one-hot encoding of string columns (not scaled).
    y : ndarray of shape (n_samples,), int64
        Encoded labels in ``[0, n_classes)``.
    class_names : list of str
        ``class_names[k]`` is the original label of code ``k``.
    feature_names : list of str
        ``"x<j>"`` for numeric column ``j``, ``"x<j>=<value>"`` for one-hot columns.
    """

    name: str
    X: np.ndarray
    y: np.ndarray
    class_names: list[str]
    feature_names: list[str]

    @property
    def n_classes(self) -> int:
        """Number of classes ``C``."""
        return len(self.class_names)


def _as_float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _read_rows(path: Path) -> tuple[list[list[str]], list[int]]:
    rows, line_numbers = [], []
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle, skipinitialspace=True)
        for row in reader:
            if not row or all(not field.strip() for field in row):
                continue  # blank line
            rows.append([field.strip() for field in row])
            line_numbers.append(reader.line_num)
    return rows, line_numbers


def load_keel(path: str | os.PathLike) -> KeelDataset:
    """Read one KEEL ``.dat``-style file.

    Parameters
    ----------
    path : str or path-like
        The file (headerless CSV, label in the last column).

    Returns
    -------
    KeelDataset

    Raises
    ------
    FileNotFoundError
        The file does not exist.
    ValueError
        Empty file, fewer than two columns, fewer than two classes, or a malformed line
        (wrong field count, empty field, non-finite number, a string in a numeric column or a
        number in a string column); the message names the file and the line number.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"data file not found: {path}")
    rows, lines = _read_rows(path)
    if not rows:
        raise ValueError(f"{path}: no data rows")
    width = len(rows[0])
    if width < 2:
        raise ValueError(f"{path}, line {lines[0]}: need at least one feature and a label")
    for row, line in zip(rows, lines, strict=True):
        if len(row) != width:
            raise ValueError(f"{path}, line {line}: expected {width} fields, found {len(row)}")
        if any(field == "" for field in row):
            raise ValueError(f"{path}, line {line}: empty field")
    columns, names = [], []
    for j in range(width - 1):
        values = [row[j] for row in rows]
        parsed = [_as_float(v) for v in values]
        numeric = parsed[0] is not None
        for text, v, line in zip(values, parsed, lines, strict=True):
            if (v is not None) != numeric:
                kind = "numeric" if numeric else "a string column"
                raise ValueError(f"{path}, line {line}: column {j} is {kind}, found {text!r}")
            if v is not None and not math.isfinite(v):
                raise ValueError(f"{path}, line {line}: column {j} is not finite ({text!r})")
        if numeric:
            columns.append(np.asarray(parsed, dtype=float)[:, None])
            names.append(f"x{j}")
        else:
            categories = sorted(set(values))
            codes = np.asarray([categories.index(v) for v in values])
            columns.append((codes[:, None] == np.arange(len(categories))).astype(float))
            names.extend(f"x{j}={c}" for c in categories)
    labels = [row[-1] for row in rows]
    parsed_labels = [_as_float(v) for v in labels]
    if all(v is not None for v in parsed_labels):
        distinct = sorted(set(labels), key=lambda v: (float(v), v))
    else:
        distinct = sorted(set(labels))
    if len(distinct) < 2:
        raise ValueError(f"{path}: needs at least two classes, found {distinct}")
    index = {label: k for k, label in enumerate(distinct)}
    y = np.asarray([index[v] for v in labels], dtype=np.int64)
    return KeelDataset(path.stem, np.hstack(columns), y, distinct, names)


def default_data_root() -> Path | None:
    """Where the KEEL files live: ``$FERL_DATA_ROOT/tabular``, else ``../shared/data/tabular``.

    ``FERL_DATA_ROOT`` names the folder that holds every data set of the project (``tabular/``,
    ``cub/``, ``awa2/``), as for `cbm.data`. The fallback is the development layout: a ``shared``
    folder beside the repository (or beside the current folder).

    Returns
    -------
    Path or None
        ``None`` when no candidate exists (the caller must then be given ``--data-root``).
    """
    env = os.environ.get("FERL_DATA_ROOT")
    if env:
        return Path(env) / "tabular"
    repo = Path(__file__).resolve().parents[2]
    for base in (repo.parent, Path.cwd().parent):
        fallback = base / "shared" / "data" / "tabular"
        if fallback.is_dir():
            return fallback
    return None


def list_datasets(root: str | os.PathLike) -> list[str]:
    """Names of the data sets under ``root``, in ``INDEX.tsv`` order when it exists.

    Parameters
    ----------
    root : str or path-like
        Folder with ``<name>.dat`` files and optionally ``INDEX.tsv`` (first column ``name``).

    Returns
    -------
    list of str

    Raises
    ------
    FileNotFoundError
        ``root`` is not a folder, or it holds no ``.dat`` file.
    """
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"data root is not a folder: {root}")
    index = root / "INDEX.tsv"
    if index.is_file():
        with index.open(encoding="utf-8") as handle:
            names = [row["name"] for row in csv.DictReader(handle, delimiter="\t")]
    else:
        names = sorted(p.stem for p in root.glob("*.dat"))
    if not names:
        raise FileNotFoundError(f"no .dat files under {root}")
    return names
