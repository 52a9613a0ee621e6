"""Intervention curves: a head's metrics after k answered concept groups, k = 0 ... all groups.

:func:`intervention_curve` simulates an expert: for every input, a policy
(:mod:`cbm.heads.policies`) picks the next group(s), the expert answers with the input's true
concept labels (entered as the head's expert values, :class:`~cbm.concepts.interventions.ExpertValues`),
and the head is re-run on the answered vector (:func:`cbm.heads.interventions.head_outputs`). At
each k of the grid it records accuracy and, for FERL heads, credal coverage, mean set size,
abstention rate, mean ignorance and mean OOD score; the OOD scores themselves are kept so that a
held-out-class split can be compared with the test split at the same k (AUROC).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cbm.concepts.interventions import ConceptGroups, ExpertValues, apply_answers
from cbm.heads import ConceptHead
from cbm.heads.interventions import HeadOutputs, head_outputs
from cbm.heads.policies import choose_groups, group_scores
from ferl import metrics as M

__all__ = ["CURVE_METRICS", "Curve", "intervention_curve", "k_grid", "outputs_metrics"]

#: Metrics of a curve point: (key, label, percent scale).
CURVE_METRICS = (("accuracy", "accuracy (%)", True), ("coverage", "credal coverage (%)", True),
                 ("mean_set_size", "mean set size", False), ("abstention", "abstention (%)", True),
                 ("ignorance", "mean ignorance", False), ("ood", "mean OOD score", False))
_DENSE_UP_TO = 30
_SPARSE = (0, 1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 25, 30, 40, 50, 60, 80, 100, 150, 200)


def k_grid(n_groups: int, ks: Sequence[int] | None = None) -> list[int]:
    """The k at which a curve is measured: every k up to ``n_groups`` when there are at most 30
    groups, else a sparse grid; always 0 and ``n_groups``. ``ks`` given: those (clipped), plus 0
    and ``n_groups``. ValueError for a negative k."""
    if ks is not None and any(int(k) < 0 for k in ks):
        raise ValueError(f"k values must be >= 0, got {list(ks)}")
    base = (range(n_groups + 1) if n_groups <= _DENSE_UP_TO else _SPARSE) if ks is None else ks
    return sorted({0, n_groups} | {min(int(k), n_groups) for k in base})


def outputs_metrics(out: HeadOutputs, y_idx: np.ndarray | None) -> dict[str, float]:
    """Curve-point metrics of head outputs; ``y_idx`` (class index per row, or None for rows of
    classes the head never saw) enables accuracy and coverage. Values the head cannot give are NaN."""
    nan = float("nan")
    res = {key: nan for key, _, _ in CURVE_METRICS}
    if y_idx is not None:
        res["accuracy"] = M.accuracy(y_idx, out.pred)
    if out.sets is not None:
        if y_idx is not None:
            res["coverage"] = M.coverage(y_idx, out.sets)
        res["mean_set_size"] = M.mean_set_size(out.sets)
        res["abstention"] = float(out.sets.all(axis=1).mean())
        res["ignorance"] = float(out.ignorance.mean())
    if out.ood is not None:
        res["ood"] = float(out.ood.mean())
    return res


@dataclass
class Curve:
    """One head x policy x split curve.

    Attributes
    ----------
    ks : list of int
    points : list of dict
        Per k: ``k`` and the :data:`CURVE_METRICS` values (NaN where undefined).
    ood : dict of int to ndarray, or {}
        Per k the OOD score of every row (FERL heads).
    asked : ndarray of shape (n, G), int
        The step at which each group of each row was answered (0 = never).
    """

    ks: list
    points: list
    ood: dict
    asked: np.ndarray


def intervention_curve(head: ConceptHead, X: np.ndarray, answers: np.ndarray, groups: ConceptGroups,
                       expert: ExpertValues, policy: str, ks: Sequence[int], seed: int = 0,
                       y_idx: np.ndarray | None = None, ood_kind: str | None = None,
                       feature_score: np.ndarray | None = None) -> Curve:
    """Answer groups one policy step at a time and measure the head at every k of ``ks``.

    Parameters
    ----------
    head : ConceptHead
    X : ndarray of shape (n, k), float in [0, 1]
        Concept values the head reads (calibrated for a calibrated head).
    answers : ndarray of shape (n, k), {0, 1}
        The expert's answers: the true concept labels.
    groups : ConceptGroups
    expert : ExpertValues
    policy : str
        A name of :data:`cbm.heads.policies.POLICIES`.
    ks : sequence of int
        Increasing, from 0 (see :func:`k_grid`); between two k the policy picks the difference at
        once from its current scores.
    seed : int
        Seed of the random policy.
    y_idx : ndarray of shape (n,), optional
        True class index per row in ``head.classes_`` (None: no accuracy or coverage).
    ood_kind : str or None
        FERL OOD score kind (`ferl.novelty.ood_score.OOD_KINDS`); None: the head's own
        (:attr:`cbm.heads.FERLHead.ood_kind`).
    feature_score : ndarray of shape (n,), optional
        The rows' feature typicality (their images', unchanged by the answers), read by a FERL
        head's operating point.

    Returns
    -------
    Curve

    Raises
    ------
    ValueError
        Shapes that do not match, a k grid that is not increasing from 0, an unknown policy.
    """
    X = np.asarray(X, dtype=np.float64)
    answers = np.asarray(answers, dtype=np.float64)
    if answers.shape != X.shape:
        raise ValueError(f"answers {answers.shape} must have the shape of X {X.shape}")
    ks = [int(k) for k in ks]
    if not ks or ks[0] != 0 or any(b <= a for a, b in zip(ks, ks[1:], strict=False)) \
            or ks[-1] > groups.n_groups:
        raise ValueError(f"ks must increase from 0 to at most {groups.n_groups}, got {ks}")
    rng = np.random.default_rng(seed)
    asked = np.zeros((X.shape[0], groups.n_groups), dtype=bool)
    step = np.zeros(asked.shape, dtype=np.int64)
    current = X
    points, ood = [], {}
    for i, k in enumerate(ks):
        if i:
            scores = group_scores(policy, head, current, groups, expert, asked, rng)
            new = choose_groups(scores, k - ks[i - 1])
            step[new] = k
            asked |= new
            current = apply_answers(X, answers, groups.concept_mask(asked), expert)
        out = head_outputs(head, current, ood_kind, feature_score=feature_score)
        points.append({"k": k, **outputs_metrics(out, y_idx)})
        if out.ood is not None:
            ood[k] = out.ood
    return Curve(ks, points, ood, step)
