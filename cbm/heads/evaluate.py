"""Test metrics of a fitted head: accuracy, ECE, AURC, the credal sets (FERL heads: the
coverage-targeted set and the paper's interval-dominance set) and every head's split-conformal
baseline sets at the same coverage (:mod:`ferl.metrics`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from cbm.heads.base import ConceptHead
from cbm.heads.models import FERLHead
from ferl import metrics as M
from ferl.evidence.conformal import SplitConformal

__all__ = ["conformal_metrics", "evaluate_head"]


def evaluate_head(head: ConceptHead, X: np.ndarray, y: np.ndarray,
                  concept_names: Sequence[str] | None = None) -> dict[str, float]:
    """Test metrics of a fitted head (paper §4.1), computed with :mod:`ferl.metrics`.

    Parameters
    ----------
    head : ConceptHead
    X : ndarray of shape (n, k), float in [0, 1]
    y : ndarray of shape (n,)
        True labels, of the same kind as those given to `fit`.
    concept_names : sequence of str, optional
        Checked against the head's concepts when given.

    Returns
    -------
    dict
        ``accuracy`` and ``ece`` (fractions), ``aurc`` (0-100, confidence = the largest class
        probability); for FERL heads also ``coverage``, ``determinacy``, ``mean_set_size``,
        ``abstention_rate`` (all-class sets) and ``u65`` / ``u80`` of the credal sets; once the
        head's novelty discount is calibrated (`FERLHead.fit_novelty`), ``discount_abstention`` and
        ``discount_accepted_accuracy``: the share of all-class sets with the discount on and the
        accuracy on the other inputs (None when every input abstains).

    Raises
    ------
    ValueError
        A label the head never saw in fit, or bad concept vectors / names.
    """
    idx = head.class_index(y)
    proba = head.predict_proba(X, concept_names)
    pred = np.argmax(proba, axis=1)
    out = {
        "accuracy": M.accuracy(idx, pred),
        "aurc": M.aurc(idx, pred, proba.max(axis=1)),
        "ece": M.expected_calibration_error(idx, np.clip(proba, 0.0, 1.0)),
    }
    if isinstance(head, FERLHead):
        sets = head.predict_set(X)
        out.update(
            coverage=M.coverage(idx, sets), determinacy=M.determinacy(sets),
            mean_set_size=M.mean_set_size(sets), abstention_rate=float(sets.all(axis=1).mean()),
            u65=M.u65(idx, sets), u80=M.u80(idx, sets),
        )
        refused = head.discounted_abstain(X)  # the discount at its operating point
        if refused is not None:
            kept = ~refused
            out.update(discount_abstention=float(refused.mean()),
                       discount_accepted_accuracy=M.accuracy(idx[kept], pred[kept]) if kept.any() else None)
        if head.coverage_ is not None:  # the paper's interval-dominance set beside the coverage-targeted one
            paper = head.predict_set(X, coverage=None)
            out.update(paper_coverage=M.coverage(idx, paper), paper_mean_set_size=M.mean_set_size(paper),
                       paper_abstention_rate=float(paper.all(axis=1).mean()))
    return out


def conformal_metrics(head: ConceptHead, X_val: np.ndarray, y_val: np.ndarray, X_test: np.ndarray,
                      y_test: np.ndarray, coverage: float) -> dict[str, float]:
    """Split-conformal sets of any head at ``coverage`` (LAC: ``1 - p_c <= q``, Sadinle et al. 2019;
    `ferl.evidence.conformal.SplitConformal`), calibrated on the val rows of seen classes and
    measured on test: ``conformal_coverage``, ``conformal_mean_set_size``,
    ``conformal_abstention_rate``. The baseline a user would put beside FERL's credal sets."""
    seen = np.isin(y_val, head.classes_)
    cp = SplitConformal(alpha=1.0 - coverage, score="lac").fit(
        np.clip(head.predict_proba(X_val[seen]), 0.0, 1.0), head.class_index(y_val[seen]))
    sets = cp.predict_set(np.clip(head.predict_proba(X_test), 0.0, 1.0))
    idx = head.class_index(y_test)
    return {"conformal_coverage": M.coverage(idx, sets), "conformal_mean_set_size": M.mean_set_size(sets),
            "conformal_abstention_rate": float(sets.all(axis=1).mean())}
