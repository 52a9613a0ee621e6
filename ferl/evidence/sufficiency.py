"""The sufficient sources of a decision read from learned weights of evidence (beyond the paper).

With learned weights of evidence (`ferl.evidence.weights`) the margin of log-plausibility of the
predicted class over the runner-up, ``M = log Pl(top) - log Pl(runner-up)``, is a sum of one part
per source, ``(beta_top,j - beta_runner-up,j) s_j(x)``, plus the prior's. The *sufficient* sources
are the fewest whose parts alone, with the prior's, reach a share of ``M``: the reading of an
explanation that a person can check by hand (`ferl.explain.Explanation.decisive`).
"""

from __future__ import annotations

from numbers import Real

import numpy as np
from sklearn.utils.validation import check_is_fitted

from ferl.evidence.algebra import discount
from ferl.evidence.weights import EvidenceWeights, evidence_from_weights, rule_sources

__all__ = ["SUFFICIENT_SHARE", "sufficient_counts", "sufficient_rule_counts", "sufficient_sources"]

#: Share of the margin ``log Pl(top) - log Pl(runner-up)`` that an explanation's sufficient sources
#: reach with the prior (`sufficient_sources`).
SUFFICIENT_SHARE = 0.9


def _margin_parts(weights: EvidenceWeights, sources: np.ndarray, top: np.ndarray, runner_up: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the prior's part ``beta_0,top - beta_0,runner-up`` (n,) and each source's part
    ``(beta_top,j - beta_runner-up,j) s_j(x)`` (n, n_sources) of the margin of log-plausibility."""
    return (weights.intercept[top] - weights.intercept[runner_up],
            (weights.coef[top] - weights.coef[runner_up]) * sources)


def _check(weights: EvidenceWeights, sources, top, runner_up, share
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validated ``sources`` (n, n_sources) and class indices ``top``, ``runner_up`` (n,)."""
    if isinstance(share, bool) or not isinstance(share, Real) or not 0.0 < share <= 1.0:
        raise ValueError(f"share must be a number in (0, 1], got {share!r}")
    n_classes, n_sources = weights.coef.shape
    sources = np.atleast_2d(np.asarray(sources, dtype=np.float64))
    if sources.ndim != 2 or sources.shape[1] != n_sources:
        raise ValueError(f"sources must have shape (n, {n_sources}) (one strength per source of the "
                         f"weights), got {sources.shape}")
    if not np.all((sources >= 0.0) & (sources <= 1.0)):
        raise ValueError("sources must be strengths in [0, 1] (no NaN)")
    top, runner_up = np.atleast_1d(top), np.atleast_1d(runner_up)
    if top.shape != (sources.shape[0],) or runner_up.shape != top.shape:
        raise ValueError(f"top and runner_up need one class per row of sources ({sources.shape[0]}), got "
                         f"shapes {top.shape} and {runner_up.shape}")
    for name, k in (("top", top), ("runner_up", runner_up)):
        if k.dtype.kind not in "iu" or np.any((k < 0) | (k >= n_classes)):
            raise ValueError(f"{name} must be class indices in [0, {n_classes}), got {k.tolist()[:5]}")
    if np.any(top == runner_up):
        raise ValueError("top and runner_up must be different classes")
    return sources, top, runner_up


def sufficient_counts(weights: EvidenceWeights, sources: np.ndarray, top: np.ndarray, runner_up: np.ndarray,
                      share: float = SUFFICIENT_SHARE) -> np.ndarray:
    """How many sources `sufficient_sources` lists for each input, vectorised (beyond the paper).

    Parameters
    ----------
    weights : EvidenceWeights
    sources : ndarray of shape (n, n_sources), float64 in [0, 1]
        `rule_sources` of the inputs.
    top, runner_up : ndarray of shape (n,), int
        Class indices per input (the predicted class and the next one).
    share : float in (0, 1]

    Returns
    -------
    ndarray of shape (n,), int64 >= 0
        0 where the prior alone reaches the share, or where the margin is not positive (nothing
        decides ``top`` over ``runner_up`` in plausibility).

    Raises
    ------
    ValueError
        ``share`` outside (0, 1]; sources of another width or outside [0, 1]; class indices out of
        range, not integers, or ``top == runner_up``; shapes that do not match.
    """
    sources, top, runner_up = _check(weights, sources, top, runner_up, share)
    return _counts(*_margin_parts(weights, sources, top, runner_up), share)


def _counts(prior: np.ndarray, parts: np.ndarray, share: float) -> np.ndarray:
    """`sufficient_counts` from the margin's parts (`_margin_parts`)."""
    margin = prior + parts.sum(axis=1)
    ranked = -np.sort(-parts, axis=1)  # strongest first: the positive parts lead
    reached = np.cumsum(np.maximum(ranked, 0.0), axis=1) + prior[:, None]
    need = (share * margin * (1 - 1e-12))[:, None]
    count = np.where(prior >= need[:, 0], 0, 1 + np.argmax(reached >= need, axis=1))
    return np.where(margin > 0, count, 0).astype(np.int64)


def sufficient_sources(weights: EvidenceWeights, sources: np.ndarray, top: int, runner_up: int,
                       share: float = SUFFICIENT_SHARE) -> tuple[np.ndarray, np.ndarray, float, float]:
    """The fewest sources whose weights of evidence alone, with the prior, decide ``top`` over
    ``runner_up`` (beyond the paper: the reading of an explanation a person can check by hand).

    Source ``j`` adds ``(beta_top,j - beta_runner-up,j) s_j(x)`` to the margin
    ``M = log Pl(top) - log Pl(runner_up)`` (the plausibilities' log ratio is linear in the weights
    of evidence), the prior ``beta_0,top - beta_0,runner-up``. The sources are taken strongest first
    until the prior plus their parts reach ``share * M``: with only the prior and those sources the
    margin is still at least ``share * M > 0``, so they alone put ``top`` ahead. Sufficiency
    rather than a share of the positive parts' total: on real concepts many small positive parts
    cancel against negative ones, and listing them explains nothing (the measured counts of both
    readings: docs/results/real-heads.md).

    Parameters
    ----------
    weights : EvidenceWeights
    sources : ndarray of shape (n_sources,), float64 in [0, 1]
        `rule_sources` of one input.
    top, runner_up : int
        Class indices.
    share : float in (0, 1]

    Returns
    -------
    index : ndarray of int64
        The listed sources' indices (features first, then leaves, as in `rule_sources`), strongest
        first; empty where the prior alone reaches the share or the margin is not positive.
    contribution : ndarray of float64
        Their parts of the margin, in nats (> 0).
    margin : float
        ``M`` in nats.
    prior : float
        The prior's part of ``M`` (``beta_0,top - beta_0,runner-up``), in nats.

    Raises
    ------
    ValueError
        As `sufficient_counts`, or ``sources`` not one row.
    """
    row = np.asarray(sources, dtype=np.float64)
    if row.ndim != 1:
        raise ValueError(f"sources must be the strengths of one input, shape (n_sources,), got {row.shape}")
    row, top_, runner_up_ = _check(weights, row[None, :], np.array([top]), np.array([runner_up]), share)
    prior, parts = _margin_parts(weights, row, top_, runner_up_)
    count = int(_counts(prior, parts, share)[0])
    order = np.argsort(-parts[0], kind="stable")[:count]
    return order, parts[0, order], float(prior[0] + parts[0].sum()), float(prior[0])


def sufficient_rule_counts(model, X) -> np.ndarray:
    """How many sufficient rules each row's explanation lists (``len(model.explain(x).decisive)``),
    for many rows at once (beyond the paper: `sufficient_sources`).

    Parameters
    ----------
    model : FERLClassifier
        Fitted with ``evidence_weights="learned"``.
    X : array-like of shape (n_samples, n_features_in_)

    Returns
    -------
    ndarray of shape (n_samples,), int64 >= 0

    Raises
    ------
    sklearn.exceptions.NotFittedError
        An unfitted model.
    ValueError
        Bad ``X``, or a model that reads its evidence from the tree (no weights of evidence, so no
        margin of log-plausibility to split into rules' parts).
    """
    check_is_fitted(model)
    weights = model._weights()
    if weights is None:
        raise ValueError("sufficient rules need learned weights of evidence (evidence_weights='learned'); "
                         "this model reads its evidence from the tree")
    X = model._check_X(X)
    phi = model.tree_.firing(X, bool(model.bounded_support), model._gate_margin())[0]
    strengths = rule_sources(X, weights[1], discount(phi, model._reliability(X))[:, model.tree_.is_leaf])
    if len(model.classes_) < 2:
        return np.zeros(X.shape[0], dtype=np.int64)
    order = np.argsort(-evidence_from_weights(weights[0], strengths).pignistic, axis=1, kind="stable")
    return sufficient_counts(weights[0], strengths, order[:, 0], order[:, 1])
