"""Concept interventions on the head side: re-run a head on intervened concepts, and explain it.

After an expert has set some concepts (:mod:`cbm.concepts.interventions`), every output of the head
is recomputed from the intervened vector: the class probabilities and, for FERL heads, the credal
set, the ignorance ``m(Theta)`` and the OOD score (:func:`head_outputs`). :func:`explain` records the
intervened concepts beside FERL's explanation (an :class:`InterventionExplanation` wraps the
:class:`ferl.explain.Explanation` of the intervened input and the one of the input as detected).
:func:`expert_values_for` chooses how an answer enters a head: Koh et al. (2020, §6)'s 5th / 95th
training percentiles for the logit-style heads (LR), the label itself for the rule and tree heads.
:func:`reached_concepts` lists, per input, the concepts a FERL tree's decision can depend on: those
split at nodes that fire (``FERLClassifier.node_firing``); changing any other concept leaves the
tree's class masses exactly as they are (learned weights of evidence and the operating point's
shift score read every concept).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from cbm.concepts.interventions import ConceptGroups, ExpertValues, intervene
from cbm.data.concept_tables import ConceptTable
from cbm.heads.base import ConceptHead
from cbm.heads.operating import decide, explain_decision
from ferl.explain import Explanation

__all__ = ["EXPERT_MODES", "HeadOutputs", "InterventionExplanation", "expert_values_for", "explain",
           "head_outputs", "is_evidential", "reached_concepts", "training_rows"]

#: How answers enter a head: "auto" (percentiles for LR heads, labels otherwise), "labels", "percentiles".
EXPERT_MODES = ("auto", "labels", "percentiles")
#: Heads whose inputs feed logits (Koh's percentile values apply to them under "auto").
_LOGIT_KINDS = ("lr", "lr-restricted")


def is_evidential(head: ConceptHead) -> bool:
    """True for FERL heads (credal sets, ignorance, OOD score)."""
    return head.kind == "ferl"


def expert_values_for(head: ConceptHead, X_train: np.ndarray, mode: str = "auto") -> ExpertValues:
    """How an expert's answer enters ``head``: ``mode`` of :data:`EXPERT_MODES`.

    ``X_train`` (n, k) are the head's training inputs (raw or calibrated, as the head was fitted),
    for the percentiles. ValueError for an unknown mode.
    """
    if mode not in EXPERT_MODES:
        raise ValueError(f"unknown expert-value mode {mode!r}; choose from {list(EXPERT_MODES)}")
    if mode == "percentiles" or (mode == "auto" and head.kind in _LOGIT_KINDS):
        return ExpertValues.percentiles(X_train)
    return ExpertValues.labels(np.shape(X_train)[1])


def training_rows(head: ConceptHead, X: np.ndarray, y: np.ndarray, table: ConceptTable | None = None,
                  seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The rows ``head`` is fitted on: ``X``, ``y`` as given, or for a head with
    `ConceptHead.answered_fit` those rows plus a copy with randomised interventions.

    In the copy each row answers each of its concept groups with a probability drawn uniformly in
    [0, 1] for that row, with its true labels entered as the head's expert values
    (:func:`expert_values_for`): every number of answered groups is trained on, as in Espinosa
    Zarlenga et al. (2023)'s randomised interventions, here on a fixed detector. Beyond the paper: a
    tree fitted on soft concept probabilities splits on where a probability falls between 0 and 1,
    and an answer at 0 or 1 would send an input to leaves its training never filled
    (docs/results/interventions/answers-that-hurt.md).

    Parameters
    ----------
    head : ConceptHead
        Not fitted yet.
    X : ndarray of shape (n, k), float in [0, 1]
        The head's training inputs.
    y : ndarray of shape (n,)
        Their class labels.
    table : ConceptTable or None
        The training rows' concept table (its ``concept_labels`` and ``concept_groups``, rows in the
        order of ``X``); None: no copy (e.g. for inputs that are the true labels already).
    seed : int >= 0
        Seed of the answered share and groups (same seed, same copy).

    Returns
    -------
    X_fit : ndarray of shape (n, k) or (2 n, k), float64
    y_fit : ndarray of shape (n,) or (2 n,)

    Raises
    ------
    ValueError
        ``y`` of another length than ``X``, a table whose rows (their number, or their classes in
        order: ``y`` must be the table's class indices or class names) or concept count do not match
        ``X``, a seed that is not a non-negative integer.
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    if len(y) != len(X):
        raise ValueError(f"y has {len(y)} labels for {len(X)} training rows")
    if table is None or not head.answered_fit:
        return X, y
    labels = np.asarray(table.concept_labels, dtype=np.float64)
    given = np.asarray(y)
    same_rows = labels.shape == np.shape(X) and (
        np.array_equal(given, table.y) or np.array_equal(given, np.asarray(table.class_names)[table.y]))
    if not same_rows:
        raise ValueError(f"the concept table ({labels.shape[0]} rows x {labels.shape[1]} concepts) does not "
                         f"hold the training rows {np.shape(X)} with their classes y, in order: pass the "
                         "table whose rows X and y are")
    groups = ConceptGroups.from_concepts(table.concept_names, table.concept_groups, labels)
    rng = np.random.default_rng(seed)
    share = rng.random(labels.shape[0])
    answered = groups.concept_mask(rng.random((labels.shape[0], groups.n_groups)) < share[:, None])
    copy = np.where(answered, expert_values_for(head, X)(labels), X)
    return np.vstack([X, copy]), np.concatenate([y, y])


@dataclass(frozen=True)
class HeadOutputs:
    """A head's outputs on a batch of concept vectors.

    Attributes
    ----------
    proba : ndarray of shape (n, C)
        Class probabilities (FERL: pignistic), columns in ``head.classes_`` order.
    sets : ndarray of shape (n, C), bool, or None
        FERL's credal sets at the head's operating point (`cbm.heads.operating.decide`; all True
        where the row abstains), None for other heads.
    ignorance : ndarray of shape (n,) or None
        FERL's ``m(Theta)``.
    ood : ndarray of shape (n,) or None
        FERL's OOD score of the kind :func:`head_outputs` was given (higher = more novel).
    """

    proba: np.ndarray
    sets: np.ndarray | None = None
    ignorance: np.ndarray | None = None
    ood: np.ndarray | None = None

    @property
    def pred(self) -> np.ndarray:
        """Index of the predicted class (first on ties), int64 of shape (n,)."""
        return np.argmax(self.proba, axis=1)


def head_outputs(head: ConceptHead, X: np.ndarray, ood_kind: str | None = None,
                 ood: bool = True, feature_score: np.ndarray | None = None) -> HeadOutputs:
    """Every output of ``head`` on concept vectors ``X`` (n, k) in [0, 1].

    For FERL heads the outputs are the head's decision at its operating point
    (`cbm.heads.operating.decide`, what ``predict`` answers; ``feature_score`` (n,): the images'
    feature typicality, unchanged by an intervention, None: unknown) and, with ``ood``, the OOD
    score of kind ``ood_kind`` (`ferl.novelty.ood_score.OOD_KINDS`; None: the head's own,
    :attr:`cbm.heads.FERLHead.ood_kind`, the kind ``predict`` flags with).

    Raises
    ------
    ValueError
        Bad concept vectors (see `ConceptHead.predict_proba`), an OOD kind not of
        `ferl.novelty.ood_score.OOD_KINDS`.
    """
    if not is_evidential(head):
        return HeadOutputs(head.predict_proba(X))
    X = head._check_X(X)
    dec = decide(head, X, feature_score)
    kind = ood_kind or head.ood_kind
    score = (dec.ood_score if kind == head.ood_kind else head.model_.ood_score(X, kind)) if ood else None
    return HeadOutputs(dec.evidence.pignistic, dec.sets, dec.evidence.ignorance, score)


def reached_concepts(head: ConceptHead, X: np.ndarray) -> np.ndarray:
    """Concepts split at a firing node of a FERL head, bool of shape (n, k).

    Only these can change the class masses of an input: the firing of every node, hence every
    evidence source, is a function of the split features of the nodes above it that fire.
    ValueError for a head that is not FERL.
    """
    if not is_evidential(head):
        raise ValueError(f"head {head.name!r} is not a FERL head: it has no firing nodes")
    phi = head.model_.node_firing(head._check_X(X))
    feature = head.model_.tree_.feature
    internal = np.flatnonzero(feature >= 0)
    out = np.zeros((phi.shape[0], len(head.concept_names_)), dtype=bool)
    rows, cols = np.nonzero(phi[:, internal] > 0)
    out[rows, feature[internal[cols]]] = True
    return out


@dataclass(frozen=True)
class InterventionExplanation:
    """A FERL explanation of an intervened input, with the intervention recorded.

    Attributes
    ----------
    explanation : ferl.explain.Explanation
        Of the input after the intervention.
    before : ferl.explain.Explanation
        Of the input as the detector (and calibration) gave it.
    intervened : tuple of dict
        Per set concept: ``concept``, ``group``, ``before``, ``after`` (values the head read) and
        ``answer`` (the expert's label).
    """

    explanation: Explanation
    before: Explanation
    intervened: tuple

    def to_dict(self) -> dict:
        """`Explanation.to_dict` of the intervened input plus ``intervened`` and ``before``
        (prediction, credal set, ignorance and OOD score before the intervention)."""
        b = self.before
        return {**self.explanation.to_dict(), "intervened": [dict(r) for r in self.intervened],
                "before": {"prediction": b.prediction, "credal_set": list(b.credal_set),
                           "abstain": b.abstain, "ignorance": b.ignorance, "ood_score": b.ood_score}}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def to_markdown(self, digits: int = 3) -> str:
        """The intervened concepts, the decision before, then the explanation after."""
        f = f".{digits}f"
        b = self.before
        lines = ["**Intervened concepts** (expert answers)", "",
                 "| concept | group | before | after |", "|---|---|---:|---:|"]
        lines += [f"| {r['concept']} | {r['group']} | {r['before']:{f}} | {r['after']:{f}} |"
                  for r in self.intervened]
        before = "abstained" if b.abstain else f"credal set {{{', '.join(str(c) for c in b.credal_set)}}}"
        lines += ["", f"Before the intervention: prediction **{b.prediction}**, {before}, ignorance "
                      f"{b.ignorance:{f}}, OOD score {b.ood_score:{f}}.", "", "After the intervention:", "",
                  self.explanation.to_markdown(digits)]
        return "\n".join(lines)


def explain(head: ConceptHead, x: np.ndarray, groups: ConceptGroups, values: Mapping[str, object],
            expert: ExpertValues | None = None, top_k: int | None = 5,
            feature_score: float | None = None) -> InterventionExplanation:
    """Intervene on one input and explain the FERL decision before and after, both at the head's
    operating point (`cbm.heads.operating.explain_decision`; ``feature_score``: the image's feature
    typicality, unchanged by the intervention).

    Parameters
    ----------
    head : ConceptHead
        A FERL head.
    x : ndarray of shape (k,) or (1, k)
        The concept values the head reads (calibrated for a calibrated head).
    groups : ConceptGroups
    values : mapping of str to value
        Expert answers by concept or group name (see :func:`cbm.concepts.interventions.intervene`).
    expert : ExpertValues, optional
        Default: the labels themselves.
    top_k : int or None
        Anomalous attributes listed.

    Raises
    ------
    ValueError
        Not a FERL head, several rows, or a bad intervention (unknown name, value outside [0, 1]).
    """
    if not is_evidential(head):
        raise ValueError(f"head {head.name!r} is not a FERL head: only FERL heads explain their decisions")
    X = np.asarray(x, dtype=np.float64)
    X = X.reshape(1, -1) if X.ndim == 1 else X
    if X.ndim != 2 or X.shape[0] != 1:
        raise ValueError(f"explain takes one input of shape (k,) or (1, k), got shape {np.shape(x)}")
    done = intervene(X, groups, values, expert)
    return InterventionExplanation(
        explanation=explain_decision(head, done.X[0], feature_score, top_k),
        before=explain_decision(head, X[0], feature_score, top_k),
        intervened=tuple(done.records(groups, X)),
    )
