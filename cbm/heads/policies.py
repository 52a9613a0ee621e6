"""Intervention policies: which concept group to ask an expert about next, per input.

A policy scores every group of every input (:func:`group_scores`, higher = ask first); groups
already answered score ``-inf``. :func:`choose_groups` takes the best ``m`` of each row. None of
the policies reads a label, and none needs a model besides the head.

``random``
    A uniformly random order (seeded).
``uncertainty``
    The group holding the concept whose value is closest to 0.5 (score ``1 - 2 min_j |x_j - 0.5|``),
    Shin et al. (2023)'s UCP criterion taken at its most uncertain member.
``ectp``
    Shin et al. (2023), "A Closer Look at the Intervention Procedure of Concept Bottleneck Models"
    (ICML), §3.1 "Expected change in target prediction", the best of their criteria that needs no
    ground truth and no extra training (their LCP reads the true concepts): concept j scores
    ``(1 - x_j) KL(f(x | x_j = 0) || f(x)) + x_j KL(f(x | x_j = 1) || f(x))``, with ``f`` the head's
    class probabilities and 0 / 1 entered as the head's expert values; a group scores the mean of
    its concepts (their group-wise criterion). Their order is computed once; here every policy is
    re-scored after each answer (the same criterion, applied greedily).
``evidence`` (ours, FERL heads)
    The group whose answer is expected to move FERL's evidence most. Only the concepts split at
    nodes that fire can change the class masses (:func:`cbm.heads.interventions.reached_concepts`);
    a group without such a concept scores 0 and costs nothing. For the others, every answer is
    enumerated: each value of a one-hot group (the whole group set, the others 0), or each
    combination of the reached concepts of another group (at most ``2 ** MAX_ENUMERATED``; beyond,
    the concepts are taken one at a time and their scores added). An answer's probability is the
    detector's (``x_v`` normalised over a one-hot group, ``prod x_j^a (1 - x_j)^(1 - a)`` otherwise),
    and the score is the expected shift of the belief interval ``[Bel(c), Pl(c)]`` of every class,
    ``E_a[ 1/2 sum_c |Bel_a(c) - Bel(c)| + |Pl_a(c) - Pl(c)| ]`` (a change of the credal set needs
    such a shift; an ignorance reduction ``m(Theta) - m_a(Theta)`` is one). Groups that cannot move
    the evidence are ordered by FERL's anomalous-attribute ranking (the group's most anomalous
    concept, :meth:`ferl.FERLClassifier.anomalous_features`): answering them moves the OOD score.

    The shift measure: on the three synthetic-world runs with ``p_swap`` noise (detector seeds 0-2,
    FERL-deep fitted on the true concepts) the interval shift, the total variation of the pignistic
    probability, the largest per-class change of Bel and Pl, and "the top class changes" (plus total
    variation) gave the same accuracy curves within a point at every k; the interval shift is kept
    as the one that reads the credal set's own quantities (figures in
    docs/results/concept-heads.md).
"""

from __future__ import annotations

import numpy as np

from cbm.concepts.interventions import ConceptGroups, ExpertValues
from cbm.heads.base import ConceptHead
from cbm.heads.interventions import head_outputs, is_evidential, reached_concepts

__all__ = ["MAX_ENUMERATED", "POLICIES", "choose_groups", "group_scores"]

#: Policy names, in report order.
POLICIES = ("random", "uncertainty", "ectp", "evidence")
#: Largest number of reached concepts of a (not one-hot) group whose answers are enumerated jointly.
MAX_ENUMERATED = 8
#: Weight of the anomalous-attribute ranking in the evidence score (a tie-breaker, in [0, 1]).
_ANOMALY_WEIGHT = 1e-6
_EPS = 1e-12
_CHUNK_ROWS = 200_000


def _kl(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Row-wise KL(p || q) of probability rows, zeros clipped to 1e-12."""
    p = np.clip(p, _EPS, None)
    q = np.clip(q, _EPS, None)
    return np.sum(p * (np.log(p) - np.log(q)), axis=-1)


def _proba(head: ConceptHead, X: np.ndarray) -> np.ndarray:
    return np.concatenate([head_outputs(head, X[i:i + _CHUNK_ROWS], ood=False).proba
                           for i in range(0, len(X), _CHUNK_ROWS)])


def _uncertainty(X: np.ndarray, groups: ConceptGroups) -> np.ndarray:
    u = 1.0 - 2.0 * np.abs(X - 0.5)
    return np.stack([u[:, list(m)].max(axis=1) for m in groups.members], axis=1)


def _ectp(head: ConceptHead, X: np.ndarray, groups: ConceptGroups, expert: ExpertValues) -> np.ndarray:
    n, k = X.shape
    concept = np.empty((k, n))
    j = np.arange(k)
    step = max(1, _CHUNK_ROWS // (2 * k))
    for r in range(0, n, step):
        x = X[r:r + step]
        p = _proba(head, x)
        probes = np.repeat(x[None], 2 * k, axis=0)  # (2k, rows, k): concept j set "absent" / "present"
        probes[j, :, j] = expert.low[:, None]
        probes[k + j, :, j] = expert.high[:, None]
        q = _proba(head, probes.reshape(-1, k)).reshape(2 * k, len(x), -1)
        concept[:, r:r + step] = (1.0 - x.T) * _kl(q[:k], p[None]) + x.T * _kl(q[k:], p[None])
    return np.stack([concept[list(m)].mean(axis=0) for m in groups.members], axis=1)


def _shift(ev_bel, ev_pl, bel, pl) -> np.ndarray:
    return 0.5 * (np.abs(ev_bel - bel).sum(axis=-1) + np.abs(ev_pl - pl).sum(axis=-1))


def _answers(x_sub: np.ndarray, exclusive: bool) -> tuple[np.ndarray, np.ndarray]:
    """Answers (A, s) of s concepts and their probabilities (n, A) under the detector's values (n, s)."""
    s = x_sub.shape[1]
    if exclusive:
        w = x_sub + _EPS
        return np.eye(s), w / w.sum(axis=1, keepdims=True)
    answers = ((np.arange(2 ** s)[:, None] >> np.arange(s)[None]) & 1).astype(np.float64)
    prob = np.prod(np.where(answers[None] == 1, x_sub[:, None], 1.0 - x_sub[:, None]), axis=2)
    return answers, prob


def _expected_shift(head, X, cols, answers, prob, expert, bel, pl) -> np.ndarray:
    """Expected interval shift (n,) when concepts ``cols`` of rows X (n, k) take ``answers`` (A, s)."""
    n, a = X.shape[0], answers.shape[0]
    probes = np.repeat(X[:, None], a, axis=1)  # (n, A, k)
    probes[:, :, cols] = expert.low[cols] + answers[None] * (expert.high[cols] - expert.low[cols])
    flat = probes.reshape(n * a, -1)
    out = np.empty(n * a)
    for i in range(0, n * a, _CHUNK_ROWS):
        ev = head.model_.evidence(flat[i:i + _CHUNK_ROWS])
        rows = np.arange(i, min(i + _CHUNK_ROWS, n * a)) // a
        out[i:i + _CHUNK_ROWS] = _shift(ev.mass, ev.plausibility, bel[rows], pl[rows])
    return (out.reshape(n, a) * prob).sum(axis=1)


def _evidence(head: ConceptHead, X: np.ndarray, groups: ConceptGroups, expert: ExpertValues,
              asked: np.ndarray) -> np.ndarray:
    if not is_evidential(head):
        raise ValueError(f"the evidence policy needs a FERL head, not {head.name!r}")
    n = X.shape[0]
    ev = head.model_.evidence(X)
    bel, pl = ev.mass, ev.plausibility
    reached = reached_concepts(head, X)
    score = np.zeros((n, groups.n_groups))
    for g, members in enumerate(groups.members):
        m = np.asarray(members)
        pattern = reached[:, m]
        todo = ~asked[:, g] & pattern.any(axis=1)
        if not todo.any():
            continue
        if groups.exclusive[g]:
            answers, prob = _answers(X[todo][:, m], True)
            score[todo, g] = _expected_shift(head, X[todo], m, answers, prob, expert, bel[todo], pl[todo])
            continue
        for pat in np.unique(pattern[todo], axis=0):
            rows = np.flatnonzero(todo & (pattern == pat).all(axis=1))
            cols = m[pat]
            parts = [cols] if cols.size <= MAX_ENUMERATED else [c[None] for c in cols]
            for c in parts:
                answers, prob = _answers(X[np.ix_(rows, c)], False)
                score[rows, g] += _expected_shift(head, X[rows], c, answers, prob, expert, bel[rows],
                                                  pl[rows])
    anomaly = np.zeros_like(X)
    for i, row in enumerate(head.model_.anomalous_features(X, top_k=None)):
        for a in row:
            anomaly[i, a.feature] = a.score
    by_group = np.stack([anomaly[:, list(m)].max(axis=1) for m in groups.members], axis=1)
    return score + _ANOMALY_WEIGHT * by_group / (1.0 + by_group.max(axis=1, keepdims=True))


def group_scores(policy: str, head: ConceptHead, X: np.ndarray, groups: ConceptGroups, expert: ExpertValues,
                 asked: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Score of every group of every input, float64 of shape (n, G); ``-inf`` where already asked.

    Parameters
    ----------
    policy : str
        One of :data:`POLICIES`.
    head : ConceptHead
    X : ndarray of shape (n, k), float in [0, 1]
        The concept values the head reads now (answered concepts included).
    groups : ConceptGroups
    expert : ExpertValues
        How an answer enters the head (the probes of ``ectp`` and ``evidence``).
    asked : ndarray of shape (n, G), bool
        Groups already answered.
    rng : numpy.random.Generator
        For ``random``.

    Raises
    ------
    ValueError
        Unknown policy, ``evidence`` on a head that is not FERL, shapes that do not match.
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown intervention policy {policy!r}; choose from {list(POLICIES)}")
    X = np.asarray(X, dtype=np.float64)
    asked = np.asarray(asked, dtype=bool)
    if X.ndim != 2 or X.shape[1] != len(groups.concept_names) or asked.shape != (X.shape[0], groups.n_groups):
        raise ValueError(f"X {X.shape} and asked {asked.shape} must be (n, {len(groups.concept_names)}) and "
                         f"(n, {groups.n_groups})")
    if policy == "random":
        score = rng.random(asked.shape)
    elif policy == "uncertainty":
        score = _uncertainty(X, groups)
    elif policy == "ectp":
        score = _ectp(head, X, groups, expert)
    else:
        score = _evidence(head, X, groups, expert, asked)
    return np.where(asked, -np.inf, score)


def choose_groups(scores: np.ndarray, m: int) -> np.ndarray:
    """The ``m`` best-scored groups of each row that are not yet asked, bool of shape (n, G).

    Ties go to the lower group index. Rows with fewer than ``m`` groups left get all of them.
    """
    order = np.argsort(-scores, axis=1, kind="stable")[:, :m]
    chosen = np.zeros(scores.shape, dtype=bool)
    np.put_along_axis(chosen, order, True, axis=1)
    return chosen & np.isfinite(scores)
