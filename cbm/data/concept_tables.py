"""Concept tables: the detector's concept probabilities per split.

A run directory holds ``concepts/{train,val,test}.npz`` (see ``docs/DESIGN.md``), each with

============== ======================= ==========================================
key            dtype, shape            meaning
============== ======================= ==========================================
probs          float32 (n, k), [0, 1]  detector's concept probabilities
concept_labels uint8 (n, k), {0, 1}    ground-truth concept labels
y              int64 (n,), [0, C)      class index into ``class_names``
concept_names  str (k,)                concept order shared with the checkpoint
class_names    str (C,)                class names
sample_ids     str (n,), unique        sample identifiers of the data module
split          str ()                  split name (``train`` / ``val`` / ``test`` ...)
schema_version int64 ()                :data:`SCHEMA_VERSION`
concept_groups str (k,), optional      group of each concept (e.g. ``has_bill_shape``)
feature_score  float64 (n,), optional  the detector's feature typicality of the row's image
                                       (`cbm.detector.typicality`; >= 0, higher = less typical)
source_ids     str (n,), optional      shift tables: the sample id of the row's clean image
corruption     str (n,), optional      shift tables: the row's corruption
severity       int64 (n,), optional    shift tables: its severity (1-5)
============== ======================= ==========================================

Arrays are plain numpy (no pickles): ``np.load(path)`` opens them. The optional ones may be absent
(older tables, concept vectors made elsewhere); without ``concept_groups``,
:func:`concept_groups_from_names` derives each concept's group from its name (``group::value``, the
CUB and synthetic-world form; a name without ``::`` is a group of its own, AwA2's predicates).
"""

from __future__ import annotations

import io
import os
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ferl.io.persist import atomic_write_bytes

__all__ = [
    "SCHEMA_VERSION",
    "SHIFT_KEYS",
    "SHIFT_SPLIT",
    "ConceptTable",
    "check_concept_names",
    "concept_groups_from_names",
    "load_concept_table",
    "load_concept_tables",
    "save_concept_table",
]

#: Version of the concept-table layout; bumped on incompatible changes.
SCHEMA_VERSION = 1

_KEYS = ("probs", "concept_labels", "y", "concept_names", "class_names", "sample_ids", "split",
         "schema_version")
#: The columns of a shift table (val images under calibration corruptions), all or none.
SHIFT_KEYS = ("source_ids", "corruption", "severity")
#: The split name of the shift-calibration table, ``concepts/val_shift.npz``.
SHIFT_SPLIT = "val_shift"


def _first_bad(mask: np.ndarray) -> tuple[int, int]:
    row, col = np.argwhere(mask)[0]
    return int(row), int(col)


@dataclass(frozen=True, eq=False)
class ConceptTable:
    """One split's concept probabilities and labels, validated on construction.

    Parameters
    ----------
    probs : array-like of shape (n, k)
        Concept probabilities in [0, 1]; stored as float32.
    concept_labels : array-like of shape (n, k)
        Binary concept labels (0/1); stored as uint8.
    y : array-like of shape (n,)
        Class indices in ``[0, len(class_names))``; stored as int64.
    concept_names : sequence of str
        k unique names.
    class_names : sequence of str
        C unique names.
    sample_ids : array-like of shape (n,)
        Unique sample ids; stored as str.
    split : str
        Split name, used in error messages.
    concept_groups : sequence of str or mapping of str to sequence of int, optional
        Group name of each of the k concepts, or a data set's ``{group: [concept indices]}``; None
        derives them from the names (:func:`concept_groups_from_names`).
    feature_score : array-like of shape (n,), optional
        The detector's feature typicality of each row (finite, >= 0); stored as float64.
    shift : mapping of str to array-like of shape (n,), optional
        A shift table's `SHIFT_KEYS` columns (``source_ids`` and ``corruption`` as str,
        ``severity`` as int64 in 1-5).

    Raises
    ------
    ValueError
        A wrong shape, a NaN / infinite / out-of-[0, 1] probability or a non-binary label (the
        message names the split, row, sample id and concept), a class index out of range,
        duplicated names or ids.
    """

    probs: np.ndarray
    concept_labels: np.ndarray
    y: np.ndarray
    concept_names: list[str]
    class_names: list[str]
    sample_ids: np.ndarray
    split: str = "unknown"
    concept_groups: Sequence[str] | Mapping[str, Sequence[int]] | None = None
    feature_score: np.ndarray | None = None
    shift: Mapping[str, np.ndarray] | None = None

    def __post_init__(self) -> None:
        where = f"concept table {self.split!r}"
        set_ = object.__setattr__
        concept_names = [str(c) for c in self.concept_names]
        class_names = [str(c) for c in self.class_names]
        sample_ids = np.asarray(self.sample_ids).astype(str)
        probs = np.asarray(self.probs)
        labels = np.asarray(self.concept_labels)
        y = np.asarray(self.y)
        n, k = len(sample_ids), len(concept_names)
        if sample_ids.ndim != 1:
            raise ValueError(f"{where}: sample_ids must be 1-D, got shape {sample_ids.shape}")
        for name, arr in (("probs", probs), ("concept_labels", labels)):
            if arr.shape != (n, k):
                raise ValueError(
                    f"{where}: {name} has shape {arr.shape}, expected ({n}, {k}) = "
                    "(len(sample_ids), len(concept_names))"
                )
        if y.shape != (n,):
            raise ValueError(f"{where}: y has shape {y.shape}, expected ({n},)")
        if not np.issubdtype(probs.dtype, np.number) or np.issubdtype(probs.dtype, np.complexfloating):
            raise ValueError(f"{where}: probs must be real numbers, got dtype {probs.dtype}")
        probs = probs.astype(np.float32)
        for bad, what in ((~np.isfinite(probs), "not finite"),
                          ((probs < 0) | (probs > 1), "outside [0, 1]")):
            if bad.any():
                r, c = _first_bad(bad)
                raise ValueError(
                    f"{where}: probs row {r} (sample {str(sample_ids[r])!r}), concept "
                    f"{concept_names[c]!r} is {probs[r, c]} ({what}; {int(bad.sum())} such entries)"
                )
        bad = ~np.isin(labels, (0, 1))
        if bad.any():
            r, c = _first_bad(bad)
            raise ValueError(
                f"{where}: concept_labels row {r} (sample {str(sample_ids[r])!r}), concept "
                f"{concept_names[c]!r} is {labels[r, c]} (must be 0 or 1)"
            )
        if n and (not np.issubdtype(y.dtype, np.integer) or y.min() < 0 or y.max() >= len(class_names)):
            raise ValueError(
                f"{where}: y must hold integer class indices in [0, {len(class_names)}), got "
                f"dtype {y.dtype}, range [{y.min()}, {y.max()}]"
            )
        for what, names in (("concept_names", concept_names), ("class_names", class_names),
                            ("sample_ids", sample_ids.tolist())):
            seen: set[str] = set()
            dup = [v for v in names if v in seen or seen.add(v)]  # type: ignore[func-returns-value]
            if dup:
                raise ValueError(f"{where}: duplicated {what}: {dup[:10]}")
        if not concept_names:
            raise ValueError(f"{where}: no concepts")
        groups = (concept_groups_from_names(concept_names) if self.concept_groups is None
                  else _group_per_concept(self.concept_groups, k))
        if len(groups) != k or not all(groups):
            raise ValueError(f"{where}: concept_groups must name a non-empty group for each of the {k} "
                             f"concepts, got {len(groups)} names")
        set_(self, "concept_groups", groups)
        set_(self, "feature_score", self._checked_feature_score(n, where))
        set_(self, "shift", self._checked_shift(n, where))
        set_(self, "probs", np.ascontiguousarray(probs))
        set_(self, "concept_labels", np.ascontiguousarray(labels, dtype=np.uint8))
        set_(self, "y", y.astype(np.int64))
        set_(self, "concept_names", concept_names)
        set_(self, "class_names", class_names)
        set_(self, "sample_ids", sample_ids)
        set_(self, "split", str(self.split))

    def _checked_feature_score(self, n: int, where: str) -> np.ndarray | None:
        if self.feature_score is None:
            return None
        score = np.asarray(self.feature_score)
        if score.shape != (n,) or not np.issubdtype(score.dtype, np.number):
            raise ValueError(f"{where}: feature_score must be {n} numbers, got shape {score.shape}")
        score = score.astype(np.float64)
        if not (np.all(np.isfinite(score)) and np.all(score >= 0)):
            raise ValueError(f"{where}: feature_score holds NaN, inf or negative values")
        return score

    def _checked_shift(self, n: int, where: str) -> dict[str, np.ndarray] | None:
        if self.shift is None:
            return None
        if sorted(self.shift) != sorted(SHIFT_KEYS):
            raise ValueError(f"{where}: a shift table needs exactly the columns {list(SHIFT_KEYS)}, got "
                             f"{sorted(self.shift)}")
        out = {k: np.asarray(self.shift[k]).astype(str) for k in ("source_ids", "corruption")}
        out["severity"] = np.asarray(self.shift["severity"])
        severity = out["severity"]
        if (any(v.shape != (n,) for v in out.values()) or not np.issubdtype(severity.dtype, np.integer)
                or not np.isin(severity, range(1, 6)).all()):
            raise ValueError(f"{where}: the shift columns must hold {n} entries each, severities in 1-5")
        out["severity"] = out["severity"].astype(np.int64)
        return out

    @property
    def n_samples(self) -> int:
        """Number of rows n."""
        return int(self.probs.shape[0])

    @property
    def n_concepts(self) -> int:
        """Number of concepts k."""
        return int(self.probs.shape[1])

    def save(self, path: str | os.PathLike) -> Path:
        """Write the table atomically as ``.npz`` (schema above). Returns the path."""
        buf = io.BytesIO()
        np.savez(
            buf,
            probs=self.probs,
            concept_labels=self.concept_labels,
            y=self.y,
            concept_names=np.asarray(self.concept_names, dtype=str),
            class_names=np.asarray(self.class_names, dtype=str),
            sample_ids=self.sample_ids,
            split=np.asarray(self.split, dtype=str),
            schema_version=np.asarray(SCHEMA_VERSION, dtype=np.int64),
            concept_groups=np.asarray(self.concept_groups, dtype=str),
            **({} if self.feature_score is None else {"feature_score": self.feature_score}),
            **(self.shift or {}),
        )
        return atomic_write_bytes(path, buf.getvalue())


def save_concept_table(
    path: str | os.PathLike,
    *,
    probs: np.ndarray,
    concept_labels: np.ndarray,
    y: np.ndarray,
    concept_names: Sequence[str],
    class_names: Sequence[str],
    sample_ids: Sequence[str] | np.ndarray,
    split: str | None = None,
    concept_groups: Sequence[str] | Mapping[str, Sequence[int]] | None = None,
) -> ConceptTable:
    """Validate the arrays as a :class:`ConceptTable` and write it atomically to ``path``.

    ``split`` defaults to the file name's stem (``concepts/val.npz`` -> ``"val"``), ``concept_groups``
    (see :class:`ConceptTable`) to :func:`concept_groups_from_names`.

    Returns
    -------
    table : ConceptTable
        The validated table that was written.

    Raises
    ------
    ValueError
        Invalid content (see :class:`ConceptTable`); nothing is written then.
    """
    table = ConceptTable(probs=probs, concept_labels=concept_labels, y=y, concept_names=list(concept_names),
                         class_names=list(class_names), sample_ids=np.asarray(sample_ids),
                         split=split if split is not None else Path(path).stem, concept_groups=concept_groups)
    table.save(path)
    return table


def load_concept_table(path: str | os.PathLike) -> ConceptTable:
    """Read and validate one ``concepts/{split}.npz`` table.

    Raises
    ------
    FileNotFoundError
        When the file does not exist.
    ValueError
        A file that is not a concept table (missing keys, other schema version) or holds invalid
        content (NaN or out-of-range probability: the message names split, row and concept).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"concept table {path} does not exist")
    if not zipfile.is_zipfile(path):  # np.load would call a text file "pickled data"
        raise ValueError(f"{path} is not a readable .npz concept table: not a zip archive of arrays (a "
                         "truncated file, or another kind of file named .npz)")
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {key: z[key] for key in z.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        raise ValueError(f"{path} is not a readable .npz concept table: {err}") from err
    missing = [key for key in _KEYS if key not in data]
    if missing:
        raise ValueError(f"{path} is not a concept table: missing {missing}")
    version = data["schema_version"]
    version = version.item() if version.shape == () and version.dtype.kind in "iu" else version.tolist()
    if version != SCHEMA_VERSION:
        raise ValueError(
            f"{path} has concept-table schema version {version}; this code reads {SCHEMA_VERSION}"
        )
    try:
        return ConceptTable(
            probs=data["probs"], concept_labels=data["concept_labels"], y=data["y"],
            concept_names=data["concept_names"].tolist(), class_names=data["class_names"].tolist(),
            sample_ids=data["sample_ids"], split=str(data["split"]),
            concept_groups=data["concept_groups"].tolist() if "concept_groups" in data else None,
            feature_score=data.get("feature_score"),
            shift={k: data[k] for k in SHIFT_KEYS if k in data} or None,
        )
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from err


def load_concept_tables(
    concepts_dir: str | os.PathLike, splits: Iterable[str] = ("train", "val", "test")
) -> dict[str, ConceptTable]:
    """Load ``{split}.npz`` for each split and check that all share concept and class names.

    ``concepts_dir`` is the ``concepts/`` folder or a run directory that contains one.

    Raises
    ------
    FileNotFoundError
        A split's file is absent.
    ValueError
        Invalid tables or names that differ between splits (the difference is listed).
    """
    folder = Path(concepts_dir)
    if not folder.name == "concepts" and (folder / "concepts").is_dir():
        folder = folder / "concepts"
    tables = {s: load_concept_table(folder / f"{s}.npz") for s in splits}
    if tables:
        first_split, first = next(iter(tables.items()))
        for s, t in tables.items():
            check_concept_names(t.concept_names, first.concept_names,
                                source=f"concepts/{s}.npz", reference=f"concepts/{first_split}.npz")
            if t.class_names != first.class_names:
                raise ValueError(
                    f"class names of concepts/{s}.npz differ from concepts/{first_split}.npz"
                )
    return tables


def _group_per_concept(groups, k: int) -> list[str]:
    """One group name per concept from a list of names or a ``{group: [indices]}`` mapping."""
    if not isinstance(groups, Mapping):
        return [str(g) for g in np.asarray(groups).tolist()]
    names: list = [None] * k
    for group, members in groups.items():
        for j in members:
            if not 0 <= int(j) < k or names[int(j)] is not None:
                raise ValueError(f"concept group {group!r}: concept index {j} is out of range or in two "
                                 "groups")
            names[int(j)] = str(group)
    missing = [j for j, g in enumerate(names) if g is None]
    if missing:
        raise ValueError(f"concept_groups leave concepts {missing[:10]} without a group")
    return names


def concept_groups_from_names(concept_names: Sequence[str]) -> list[str]:
    """Group name of each concept from its name: the part before ``::`` (``shape::circle`` ->
    ``shape``, CUB's ``has_bill_shape::dagger`` -> ``has_bill_shape``), else the name itself."""
    return [str(n).split("::", 1)[0] if "::" in str(n) else str(n) for n in concept_names]


def check_concept_names(
    names: Sequence[str], expected: Sequence[str], *, source: str, reference: str
) -> None:
    """Raise ValueError unless ``names`` equals ``expected`` (same names, same order).

    The message lists the names missing from ``source``, the unexpected ones, and the first
    positions where the order differs.
    """
    names, expected = [str(n) for n in names], [str(n) for n in expected]
    if names == expected:
        return
    have, want = set(names), set(expected)
    missing = [n for n in expected if n not in have]
    extra = [n for n in names if n not in want]
    parts = [f"concept names of {source} differ from those of {reference} "
             f"({len(names)} vs {len(expected)} concepts)"]
    if missing:
        parts.append(f"missing from {source}: {missing[:20]}")
    if extra:
        parts.append(f"not in {reference}: {extra[:20]}")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        parts.append(f"named twice in {source}: {twice[:20]}")
    elif not missing and not extra:
        moved = [(i, a, b) for i, (a, b) in enumerate(zip(names, expected, strict=True)) if a != b]
        parts.append("same names in another order; first differences (position, "
                     f"{source}, {reference}): {moved[:5]}")
    raise ValueError("; ".join(parts))
