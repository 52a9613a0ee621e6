"""A fold's FERL heads at the product's operating point: their summary, outputs and examples.

The fold fits each head as ``fit-head`` does (its credal set, novelty threshold and operating point,
`cbm.heads.operating`, on the fold's val rows and its shift-calibration rows), then reads every
number here through `cbm.heads.operating.decide`: what ``predict`` would answer on the same rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from cbm.concepts.calibration import crossfit_calibrate
from cbm.data.concept_tables import SHIFT_SPLIT, ConceptTable
from cbm.heads import FERLHead
from cbm.heads.operating import Decisions, explain_decision
from cbm.openworld.metrics import precision_at_k
from ferl import metrics as M

__all__ = ["example", "head_outputs", "head_summary", "shifted_rows"]


def example(head: FERLHead, x: np.ndarray, feature: float | None, sid: str, y: int, names: list[str],
             truth: dict, score: float, threshold: float, kind: str, top: int) -> dict:
    ex = explain_decision(head, x, feature, top_k=top)  # at the operating point, as predict explains
    near, mask = truth[y]
    concepts = head.concept_names_
    top_rule = ex.sources[0].conditions if ex.sources else ()
    return {
        "sample_id": sid, "true_class": names[y], "nearest_retained": [names[c] for c in near],
        "prediction": str(ex.prediction), "credal_set": [str(c) for c in ex.credal_set],
        "abstain": bool(ex.abstain), "ignorance": float(ex.ignorance), "kind": kind, "score": score,
        "threshold": threshold, "rejected": bool(score > threshold), "top_rule": list(top_rule),
        "named": [{"concept": a.name, "score": float(a.score), "anomalous": bool(mask[a.feature])}
                  for a in ex.anomalous_features],
        "ground_truth": [concepts[j] for j in np.flatnonzero(mask)], "reliability": float(ex.reliability),
    }


def head_outputs(decisions: Mapping[str, Decisions], classes: np.ndarray) -> dict[str, np.ndarray]:
    """A FERL head's decisions (`cbm.heads.operating.decide`) on the ``test`` and ``novel`` vectors, for
    the report's curves.

    Returns ``classes`` (the head's, as str) and per part ``p``: ``pred_p`` (column of the largest
    pignistic probability), ``proba_p`` (that probability), ``belief_p`` (Bel of that class),
    ``ignorance_p`` (m(Θ)) and ``abstain_p``, at the operating point.
    """
    out: dict[str, np.ndarray] = {"classes": np.asarray(classes).astype(str)}
    for p in ("test", "novel"):
        ev = decisions[p].evidence
        pred = np.argmax(ev.pignistic, axis=1)
        rows = np.arange(pred.size)
        out |= {f"pred_{p}": pred, f"proba_{p}": ev.pignistic[rows, pred], f"belief_{p}": ev.mass[rows, pred],
                f"ignorance_{p}": ev.ignorance, f"abstain_{p}": decisions[p].abstained}
    return out


def _ranked(head: FERLHead, X: np.ndarray, k: int) -> np.ndarray:
    """Concept indices of FERL's top-``k`` anomalous attributes per row, shape (n, k)."""
    return np.array([[a.feature for a in row] for row in head.model_.anomalous_features(X, top_k=k)])


def head_summary(head: FERLHead, X: dict, tables: Mapping[str, ConceptTable], label_of: np.ndarray,
                  gt: np.ndarray, gt_image: np.ndarray, top_k: Sequence[int], dec: dict) -> dict:
    rate = {f"{what}_{p}": float(np.mean(value)) for p in ("test", "novel") for what, value in (
        ("abstain", dec[p].abstained), ("flag", dec[p].ood_flag), ("shift_flag", dec[p].shift_flag),
        ("caught", dec[p].abstained | dec[p].ood_flag))}
    ranked = _ranked(head, X["novel"], max(top_k))
    # the same FERL head given the true concepts of the held-out images: detector errors removed
    oracle = _ranked(head, tables["novel"].concept_labels.astype(np.float64), max(top_k))
    return {
        "ood_kind": head.ood_kind,
        "accuracy": M.accuracy(head.class_index(label_of[tables["test"].y]),
                               np.argmax(head.predict_proba(X["test"]), axis=1)),
        **rate, "size": head.size(),
        "naming": {f"precision@{k}": float(precision_at_k(ranked, gt, k).mean()) for k in top_k}
        | {f"true_concepts_precision@{k}": float(precision_at_k(oracle, gt, k).mean()) for k in top_k}
        | {f"image_precision@{k}": float(precision_at_k(ranked, gt_image, k).mean()) for k in top_k}
        | {"chance": float(gt.mean()), "mean_truth_size": float(gt.sum(axis=1).mean()),
           "image_chance": float(gt_image.mean())},
    }


def shifted_rows(tables: Mapping[str, ConceptTable], X: dict, concept_names, label_of: np.ndarray,
             seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The fold's shift-calibration rows (``val_shift``, its val images under the calibration
    corruptions), calibrated with the maps of their images' cross-fitting folds as ``X["val"]`` is;
    None when the fold's detector wrote none or its tables carry no feature scores."""
    table, val = tables.get(SHIFT_SPLIT), tables["val"]
    if table is None or table.shift is None or val.feature_score is None:
        return None
    where = {s: i for i, s in enumerate(val.sample_ids.tolist())}
    rows = np.array([where[s] for s in table.shift["source_ids"].tolist()], dtype=np.int64)
    _, calibrated = crossfit_calibrate(val.probs, val.concept_labels, concept_names, seed=seed,
                                       extra=(table.probs, rows))
    return calibrated, label_of[table.y], table.feature_score


