"""Concept interventions on the concept side: groups, expert values, and setting concepts by name.

An *intervention* replaces some of the concept values a head reads by what an expert says
(Koh et al. 2020, §6 "test-time intervention"). This module owns the concept-side pieces:

* :class:`ConceptGroups`: the data set's concept groups (CUB's 28 attribute groups, the synthetic
  world's 7, one group per AwA2 predicate) and which of them are *one-hot* (every training row has
  exactly one positive concept in the group, e.g. the synthetic world's ``shape``);
* :class:`ExpertValues`: what an expert's answer (a concept label in [0, 1]) puts in a head's
  input: the label itself, or for a logit-style head Koh et al.'s 5th / 95th percentile of the
  training values of that concept (their §6: "the 5th (if false) or 95th (if true) percentile over
  the training distribution"), so that an intervened input stays inside the training range;
* :func:`intervene`: set concepts of some rows by concept or group name, keeping one-hot groups
  one-hot, with clear errors for unknown names, values outside [0, 1] or wrong shapes;
* :func:`apply_answers`: the array form used by the evaluation (a mask of answered concepts).

Values are set in the space the head reads: after per-concept calibration for a calibrated head
(the expert's answer replaces the calibrated probability; calibration is not applied to it again).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from cbm.concepts.values import check_concept_values
from cbm.data.concept_tables import concept_groups_from_names

__all__ = ["ConceptGroups", "ExpertValues", "Intervention", "apply_answers", "intervene"]


@dataclass(frozen=True)
class ConceptGroups:
    """Concept groups of a data set.

    Attributes
    ----------
    concept_names : tuple of str
        The k concepts, in column order.
    names : tuple of str
        The G group names, in order of their first concept.
    members : tuple of tuple of int
        Concept indices of each group.
    exclusive : tuple of bool
        Whether each group is one-hot (more than one concept, exactly one positive per training row).
    """

    concept_names: tuple
    names: tuple
    members: tuple
    exclusive: tuple

    @classmethod
    def from_concepts(cls, concept_names: Sequence[str], group_of: Sequence[str] | None = None,
                      labels: np.ndarray | None = None) -> ConceptGroups:
        """Groups from each concept's group name, one-hot flags from training labels.

        Parameters
        ----------
        concept_names : sequence of str of length k
        group_of : sequence of str of length k, optional
            Group of each concept (a concept table's ``concept_groups``); default: from the names
            (:func:`cbm.data.concept_tables.concept_groups_from_names`).
        labels : ndarray of shape (n, k), {0, 1}, optional
            Training concept labels; a group of two or more concepts is one-hot when every row has
            exactly one positive among them. Without labels no group is one-hot.

        Raises
        ------
        ValueError
            ``group_of`` or ``labels`` of the wrong length or shape.
        """
        names = tuple(str(n) for n in concept_names)
        group_of = concept_groups_from_names(names) if group_of is None else [str(g) for g in group_of]
        if len(group_of) != len(names):
            raise ValueError(f"group_of has {len(group_of)} entries for {len(names)} concepts")
        order = list(dict.fromkeys(group_of))
        members = tuple(tuple(j for j, g in enumerate(group_of) if g == name) for name in order)
        if labels is None:
            exclusive = tuple(False for _ in order)
        else:
            lab = np.asarray(labels)
            if lab.ndim != 2 or lab.shape[1] != len(names):
                raise ValueError(f"labels must have shape (n, {len(names)}), got {lab.shape}")
            exclusive = tuple(len(m) > 1 and bool((lab[:, list(m)].sum(axis=1) == 1).all()) for m in members)
        return cls(names, tuple(order), members, exclusive)

    @property
    def n_groups(self) -> int:
        return len(self.names)

    @property
    def group_of(self) -> np.ndarray:
        """Group index of each concept, int64 of shape (k,)."""
        out = np.empty(len(self.concept_names), dtype=np.int64)
        for g, m in enumerate(self.members):
            out[list(m)] = g
        return out

    @property
    def membership(self) -> np.ndarray:
        """bool of shape (G, k): ``membership[g, j]`` when concept j belongs to group g."""
        out = np.zeros((self.n_groups, len(self.concept_names)), dtype=bool)
        out[self.group_of, np.arange(len(self.concept_names))] = True
        return out

    def group_index(self, name: str) -> int:
        """Index of a group by name; ValueError naming the known groups for an unknown one."""
        try:
            return self.names.index(str(name))
        except ValueError:
            raise ValueError(f"unknown concept group {name!r}; groups: {list(self.names)[:30]}") from None

    def concept_index(self, name: str) -> int:
        """Index of a concept by name; ValueError for an unknown one."""
        try:
            return self.concept_names.index(str(name))
        except ValueError:
            raise ValueError(f"unknown concept {name!r} (not among the {len(self.concept_names)} concepts, "
                             f"e.g. {list(self.concept_names)[:5]})") from None

    def concept_mask(self, chosen: np.ndarray) -> np.ndarray:
        """Concepts of the chosen groups: bool (n, G) -> bool (n, k)."""
        chosen = np.asarray(chosen, dtype=bool)
        if chosen.ndim != 2 or chosen.shape[1] != self.n_groups:
            raise ValueError(f"chosen groups must have shape (n, {self.n_groups}), got {chosen.shape}")
        return chosen[:, self.group_of]


@dataclass(frozen=True)
class ExpertValues:
    """What an expert's answer puts in a head's input, per concept.

    A label ``v`` in [0, 1] becomes ``low + v * (high - low)``: with ``low = 0``, ``high = 1`` the
    label itself; with Koh et al.'s percentiles the 5th / 95th percentile of the training values.

    Attributes
    ----------
    low, high : ndarray of shape (k,), float64 in [0, 1]
    mode : str
        ``"labels"`` or ``"percentiles"``.
    """

    low: np.ndarray
    high: np.ndarray
    mode: str = "labels"

    @classmethod
    def labels(cls, k: int) -> ExpertValues:
        """Answers are put in as they are (0 or 1): the default for rule and tree heads."""
        return cls(np.zeros(k), np.ones(k), "labels")

    @classmethod
    def percentiles(cls, X_train: np.ndarray, low: float = 5.0, high: float = 95.0) -> ExpertValues:
        """Koh et al. (2020, §6)'s values for logit-style heads: per concept the ``low`` / ``high``
        percentile of the head's training inputs ``X_train`` (n, k) in [0, 1]."""
        X = np.asarray(X_train, dtype=np.float64)
        if X.ndim != 2 or X.shape[0] == 0:
            raise ValueError(f"X_train must be a non-empty (n, k) array, got shape {X.shape}")
        if not 0 <= low < high <= 100:
            raise ValueError(f"percentiles must satisfy 0 <= low < high <= 100, got {low}, {high}")
        lo, hi = np.percentile(X, [low, high], axis=0)
        return cls(lo, hi, "percentiles")

    def __call__(self, answers: np.ndarray) -> np.ndarray:
        """Head-input values of answers (n, k) in [0, 1]."""
        return self.low + np.asarray(answers, dtype=np.float64) * (self.high - self.low)


def apply_answers(X: np.ndarray, answers: np.ndarray, mask: np.ndarray, expert: ExpertValues) -> np.ndarray:
    """Replace the masked entries of ``X`` by the expert values of ``answers``.

    Parameters
    ----------
    X : ndarray of shape (n, k), float in [0, 1]
        Concept values the head reads.
    answers : ndarray of shape (n, k), in [0, 1]
        Expert labels (only the masked entries are read).
    mask : ndarray of shape (n, k), bool
    expert : ExpertValues

    Returns
    -------
    ndarray of shape (n, k), float64 (a new array)
    """
    return np.where(mask, expert(answers), X)


@dataclass(frozen=True)
class Intervention:
    """The result of :func:`intervene`.

    Attributes
    ----------
    X : ndarray of shape (n, k), float64
        Concept values after the intervention.
    mask : ndarray of shape (n, k), bool
        Entries that were set.
    answers : ndarray of shape (n, k), float64
        Expert labels of the set entries (NaN elsewhere).
    """

    X: np.ndarray
    mask: np.ndarray
    answers: np.ndarray

    def records(self, groups: ConceptGroups, before: np.ndarray, row: int = 0) -> list[dict]:
        """One dict per set concept of ``row``: concept, group, value before and after, expert label."""
        return [{"concept": groups.concept_names[j], "group": groups.names[groups.group_of[j]],
                 "before": float(before[row, j]), "after": float(self.X[row, j]),
                 "answer": float(self.answers[row, j])} for j in np.flatnonzero(self.mask[row])]


def _answers_for(groups: ConceptGroups, key: str, value) -> dict[int, float]:
    """Concept index -> expert label for one ``{name: value}`` entry of :func:`intervene`."""
    if key in groups.concept_names:
        j = groups.concept_index(key)
        v = _label(value, key)
        g = int(groups.group_of[j])
        if groups.exclusive[g] and v >= 0.5:  # the other values of a one-hot group are then absent
            return {i: (v if i == j else 0.0) for i in groups.members[g]}
        return {j: v}
    if key not in groups.names:
        raise ValueError(f"unknown concept or group {key!r}; groups: {list(groups.names)[:30]}")
    g = groups.group_index(key)
    m = groups.members[g]
    if isinstance(value, str):  # one value of the group is present: "circle" or "shape::circle"
        name = value if value in groups.concept_names else f"{key}::{value}"
        if name not in groups.concept_names or groups.concept_index(name) not in m:
            raise ValueError(f"{value!r} is not a concept of group {key!r}; its concepts: "
                             f"{[groups.concept_names[i] for i in m]}")
        j = groups.concept_index(name)
        return {i: float(i == j) for i in m}
    vec = np.atleast_1d(np.asarray(value, dtype=np.float64))
    if vec.shape != (len(m),):
        raise ValueError(f"group {key!r} has {len(m)} concepts, got {vec.size} value(s) of shape {vec.shape}")
    labels = {i: _label(v, f"{key} ({groups.concept_names[i]})") for i, v in zip(m, vec, strict=True)}
    if groups.exclusive[g] and not (np.isin(vec, (0.0, 1.0)).all() and vec.sum() == 1):
        raise ValueError(f"group {key!r} is one-hot: give exactly one 1 and zeros, or the present value's "
                         f"name, got {vec.tolist()}")
    return labels


def _label(value, what: str) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"the value given for {what!r} is not a number: {value!r}") from None
    if not 0.0 <= v <= 1.0:
        raise ValueError(f"the value given for {what!r} is {v}, outside [0, 1]")
    return v


def intervene(X: np.ndarray, groups: ConceptGroups, values: Mapping[str, object],
              expert: ExpertValues | None = None, rows: Sequence[int] | None = None) -> Intervention:
    """Set concepts of some rows to expert answers, by concept or group name.

    Parameters
    ----------
    X : ndarray of shape (n, k), float in [0, 1]
        Concept values the head reads (calibrated for a calibrated head).
    groups : ConceptGroups
    values : mapping of str to value
        Keys are concept names or group names. A concept name takes a label in [0, 1]; a label of
        0.5 or more on a concept of a one-hot group also sets that group's other concepts to 0
        (the group stays one-hot). A group name takes the name of its present value (``"circle"``
        or ``"shape::circle"``: that concept 1, the others 0) or one label per concept of the
        group (exactly one 1 and zeros for a one-hot group).
    expert : ExpertValues, optional
        How labels enter the head's input (default: the labels themselves).
    rows : sequence of int, optional
        Rows to set (default: every row).

    Returns
    -------
    Intervention

    Raises
    ------
    ValueError
        ``X`` of the wrong shape or outside [0, 1], an unknown concept or group name (named), a
        value outside [0, 1] or not a number, a group given the wrong number of values, a one-hot
        group given a value that is not one-hot, a row out of range.
    """
    k = len(groups.concept_names)
    X = check_concept_values(X, groups.concept_names, "concept values", allow_empty=True)
    expert = expert or ExpertValues.labels(k)
    if not isinstance(values, Mapping) or not values:
        raise ValueError("values must be a non-empty mapping of concept or group names to expert values")
    chosen = np.arange(X.shape[0]) if rows is None else np.asarray(rows, dtype=np.int64).reshape(-1)
    if chosen.size and (chosen.min() < -X.shape[0] or chosen.max() >= X.shape[0]):
        raise ValueError(f"rows {chosen.tolist()[:10]} out of range for {X.shape[0]} row(s)")
    labels: dict[int, float] = {}
    for key, value in values.items():
        labels.update(_answers_for(groups, str(key), value))
    cols = np.fromiter(labels, dtype=np.int64)
    answers = np.full_like(X, np.nan)
    mask = np.zeros(X.shape, dtype=bool)
    answers[np.ix_(chosen, cols)] = np.fromiter(labels.values(), dtype=np.float64)
    mask[np.ix_(chosen, cols)] = True
    return Intervention(apply_answers(X, np.nan_to_num(answers), mask, expert), mask, answers)
