"""Test metrics of a fitted head: accuracy, ECE, AURC, the credal sets (FERL heads: the product's
operating point, `cbm.heads.operating`, and the paper's interval-dominance set) and every head's
split-conformal baseline sets at the same coverage (:mod:`ferl.metrics`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from cbm.heads.base import ConceptHead
from cbm.heads.models import FERLHead
from cbm.heads.operating import decide
from ferl import metrics as M
from ferl.evidence.conformal import SplitConformal

__all__ = ["conformal_metrics", "evaluate_head"]


def evaluate_head(head: ConceptHead, X: np.ndarray, y: np.ndarray,
                  concept_names: Sequence[str] | None = None,
                  feature_score: np.ndarray | None = None) -> dict[str, float]:
    """Test metrics of a fitted head (paper §4.1), computed with :mod:`ferl.metrics`.

    Parameters
    ----------
    head : ConceptHead
    X : ndarray of shape (n, k), float in [0, 1]
    y : ndarray of shape (n,)
        True labels, of the same kind as those given to `fit`.
    concept_names : sequence of str, optional
        Checked against the head's concepts when given.
    feature_score : ndarray of shape (n,), optional
        The rows' feature typicality (the concept tables' ``feature_score``), for a FERL head's
        shift score; None: unknown.

    Returns
    -------
    dict
        ``accuracy`` and ``ece`` (fractions), ``aurc`` (0-100, confidence = the largest class
        probability); for FERL heads also, at the product's operating point (`decide`):
        ``coverage``, ``determinacy``, ``mean_set_size`` (abstentions count as every class),
        ``answered_set_size`` (the sets that are not abstentions; None when every row abstains),
        ``abstention_rate``, ``answered_right`` (rows answered with a set that holds the class),
        ``accepted_accuracy`` (accuracy of the answered rows; None when none is), ``ood_flag_rate``,
        ``shift_flag_rate``, ``u65`` / ``u80``; and the paper's interval-dominance set's
        ``paper_coverage``, ``paper_mean_set_size``, ``paper_abstention_rate``.

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
        dec = decide(head, X, feature_score)
        sets, kept = dec.sets, ~dec.abstained
        hit = sets[np.arange(idx.size), idx]
        out.update(
            coverage=M.coverage(idx, sets), determinacy=M.determinacy(sets),
            mean_set_size=M.mean_set_size(sets), abstention_rate=float(dec.abstained.mean()),
            answered_set_size=float(sets[kept].sum(axis=1).mean()) if kept.any() else None,
            answered_right=float((hit & kept).mean()),
            accepted_accuracy=M.accuracy(idx[kept], pred[kept]) if kept.any() else None,
            ood_flag_rate=float(dec.ood_flag.mean()), shift_flag_rate=float(dec.shift_flag.mean()),
            u65=M.u65(idx, sets), u80=M.u80(idx, sets),
        )
        paper = head.predict_set(X, coverage=None)  # the paper's interval-dominance set beside it
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
