"""The product's operating point: one decision per row, read the same way by every command.

A FERL head's decision for a row (its concept vector ``x`` and, when it came from an image through
the run's detector, the image's feature typicality ``f``, `cbm.detector.typicality`):

* the **shift score** ``u = (f - mu_f) / sd_f + w (j - mu_j) / sd_j``: the detector's feature
  typicality and the head's own novelty score ``j`` (its OOD score of `FERLHead.ood_kind`), each
  standardised on the clean val rows, with ``w`` = `SHIFT_WEIGHT`; ``f`` is taken at its clean
  mean when unknown (concept vectors made elsewhere);
* the **credal set**: the head's plausibility set at the target coverage whose threshold falls
  with ``u`` (`ferl.evidence.adaptive.ShiftAdaptiveSets`, its widening learned on the val images
  under ImageNet-C's validation corruptions, ``concepts/val_shift.npz``, its level on the clean
  val rows), which is the set of the evidence discounted by the reliability ``r(u)`` (Shafer's
  discounting: the **ignorance** ``m^r(Theta)`` and the pignistic probabilities reported are the
  discounted ones; the class, the pignistic arg-max, is the same with or without it);
* **abstention**: the set holds more than ``max_set_size`` classes (`MAX_SET_SIZE`), or every
  class; an abstaining row's set is every class;
* the **novelty flag**: ``j`` above the head's threshold (`FERLHead.fit_ood_threshold`, 95 % of
  the val rows accepted); the **shift flag**: ``u`` above its own threshold accepting 95 % of the
  clean val rows.

`fit_operating_point` sets it (``fit-head``); `decide` reads it (``predict``, ``fit-head``'s
metrics, the report, ``evaluate-openworld``, ``evaluate-interventions``, ``evaluate-shift``). A head
without one (fitted outside ``fit-head``) decides with its plain set, no shift score and no flag
threshold beyond its own. How the settings were chosen: docs/results/shift.md. `certified_radius`
gives, per row, the l_inf radius in concept units within which no concept vector changes the
decided class (``predict``'s page, the report; measured in docs/results/certificate.md).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from numbers import Integral

import numpy as np

from cbm.concepts.values import CONCEPT_DOMAIN
from ferl.evidence.adaptive import ShiftAdaptiveSets, true_class_nll
from ferl.evidence.algebra import Evidence, discount_evidence
from ferl.evidence.robustness import DISCOUNT_FLOOR
from ferl.explain import Explanation
from ferl.metrics import fit_acceptance_threshold

__all__ = ["MAX_SET_SIZE", "SHIFT_WEIGHT", "Decisions", "certified_radius", "decide", "explain_decision",
           "fit_operating_point", "operating_from_dict"]

#: Largest credal set the product answers with; a wider one abstains (a readable set; the measured
#: trade-off on the validation corruptions: docs/results/shift.md).
MAX_SET_SIZE = 10
#: Weight of the head's own novelty score beside the detector's feature typicality in the shift
#: score (chosen on the validation corruptions: docs/results/shift.md).
SHIFT_WEIGHT = 0.5
#: Share of the clean val rows the shift flag accepts.
SHIFT_ACCEPT = 0.95
#: Bins of equal count of the shift-calibration rows in the widening (docs/results/shift.md).
N_BINS = 15


@dataclass(frozen=True)
class Decisions:
    """The product's outputs for ``n`` rows (`decide`).

    Attributes
    ----------
    evidence : Evidence
        The head's evidence discounted by ``reliability`` (``pignistic`` (n, C), ``ignorance`` (n,)).
    sets : ndarray of shape (n, C), bool
        The credal sets; all True where the row abstains.
    abstained : ndarray of shape (n,), bool
    ood_score : ndarray of shape (n,), float64
        The head's novelty score (kind `FERLHead.ood_kind`).
    ood_flag : ndarray of shape (n,), bool
        ``ood_score`` above the head's threshold (all False without one).
    shift_score : ndarray of shape (n,), float64
        ``u`` of the module docstring (0 for every row of a head without an operating point).
    shift_flag : ndarray of shape (n,), bool
    reliability : ndarray of shape (n,), float64 in (0, 1]
        The discount of the evidence.
    """

    evidence: Evidence
    sets: np.ndarray
    abstained: np.ndarray
    ood_score: np.ndarray
    ood_flag: np.ndarray
    shift_score: np.ndarray
    shift_flag: np.ndarray
    reliability: np.ndarray


def _moments(values: np.ndarray) -> list[float]:
    sd = float(np.std(values))
    return [float(np.mean(values)), sd if sd > 1e-12 else 1.0]


def _feature_scores(feature_score, n: int, where: str) -> np.ndarray | None:
    if feature_score is None:
        return None
    score = np.asarray(feature_score, dtype=np.float64)
    if score.shape != (n,):
        raise ValueError(f"{where}: feature scores must be {n} numbers, one per row, got shape {score.shape}")
    if not np.all(np.isfinite(score)):
        bad = int(np.flatnonzero(~np.isfinite(score))[0])
        raise ValueError(f"{where}: the feature score of row {bad} is {score[bad]}: it must be finite")
    return score


def _shift_score(point: dict, novelty: np.ndarray, feature_score: np.ndarray | None) -> np.ndarray:
    (mu_j, sd_j), (mu_f, sd_f) = point["reference"]["novelty"], point["reference"]["feature"]
    feature = 0.0 if feature_score is None else (feature_score - mu_f) / sd_f
    return feature + point["shift_weight"] * (novelty - mu_j) / sd_j


def _check_size(max_set_size) -> int:
    if isinstance(max_set_size, bool) or not isinstance(max_set_size, Integral) or max_set_size < 1:
        raise ValueError(f"max_set_size must be a positive integer, got {max_set_size!r}")
    return int(max_set_size)


def fit_operating_point(head, X_val: np.ndarray, y_val: np.ndarray, feature_val: np.ndarray | None,
                        shifted: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
                        coverage: float = 0.9, max_set_size: int = MAX_SET_SIZE,
                        shift_weight: float = SHIFT_WEIGHT, n_bins: int = N_BINS) -> dict:
    """Fit a FERL head's operating point (module docstring) and store it as ``head.operating_``.

    Call after the head's novelty calibration and threshold (`FERLHead.fit_novelty`,
    `FERLHead.fit_ood_threshold`): the shift score reads the head's own novelty score.

    Parameters
    ----------
    head : FERLHead
    X_val : ndarray of shape (n, k)
        Clean held-out concept vectors (val, calibrated out of sample as test rows are).
    y_val : ndarray of shape (n,)
        Their classes; rows of classes the head never saw are left out.
    feature_val : ndarray of shape (n,) or None
        Their images' feature typicality (None: concept vectors without a detector).
    shifted : (X, y, feature_score) or None
        The same of the val images under the calibration corruptions (``concepts/val_shift.npz``);
        None: no widening (the paper's DS-conformal set at ``coverage``).
    coverage : float in (0, 1)
    max_set_size : int >= 1
    shift_weight : float >= 0
        ``w`` of the shift score (`SHIFT_WEIGHT`).
    n_bins : int >= 1
        Bins of the widening (`ferl.evidence.adaptive.ShiftAdaptiveSets`).

    Returns
    -------
    dict
        The operating point (JSON types), also ``head.operating_``.

    Raises
    ------
    ValueError
        Bad inputs or settings, no val row of the head's classes.
    """
    size = _check_size(max_set_size)
    model = head.model_
    y_val = np.asarray(y_val)
    seen = np.isin(y_val, head.classes_)
    if not seen.any():
        raise ValueError("the operating point needs val rows of the head's classes; none are")
    X = head._check_X(np.asarray(X_val)[seen])
    features = _feature_scores(feature_val, len(y_val), "val")
    features = None if features is None else features[seen]
    read = model.credal_readout(X, head.ood_kind)
    if isinstance(shift_weight, bool) or not isinstance(shift_weight, int | float) or not shift_weight >= 0:
        raise ValueError(f"shift_weight must be a number >= 0, got {shift_weight!r}")
    point = {"coverage": float(coverage), "max_set_size": size, "shift_weight": float(shift_weight),
             "reference": {"novelty": _moments(read.ood_score),
                           "feature": [0.0, 1.0] if features is None else _moments(features)}}
    u_val = _shift_score(point, read.ood_score, features)
    nll_val = true_class_nll(read.evidence.plausibility, head.class_index(y_val[seen]))
    nll_sh = u_sh = None
    if shifted is not None:
        X_sh, y_sh, f_sh = shifted
        keep = np.isin(np.asarray(y_sh), head.classes_)
        f_sh = _feature_scores(f_sh, len(y_sh), "val_shift")
        if keep.any() and features is not None and f_sh is not None:
            sh = model.credal_readout(head._check_X(np.asarray(X_sh)[keep]), head.ood_kind)
            nll_sh = true_class_nll(sh.evidence.plausibility, head.class_index(np.asarray(y_sh)[keep]))
            u_sh = _shift_score(point, sh.ood_score, f_sh[keep])
    sets = ShiftAdaptiveSets(coverage, n_bins).fit(nll_val, u_val, nll_sh, u_sh)
    point |= {"sets": sets.to_dict(), "shift_threshold": fit_acceptance_threshold(u_val, SHIFT_ACCEPT),
              "n_val": int(seen.sum()), "n_shifted": 0 if nll_sh is None else int(nll_sh.size)}
    head.operating_ = point
    return point


def operating_from_dict(doc, where: str) -> dict | None:
    """A saved operating point checked (None passes), or ValueError naming ``where`` and the problem."""
    if doc is None:
        return None
    try:
        ShiftAdaptiveSets.from_dict(doc["sets"])
        _check_size(doc["max_set_size"])
        numbers = [*doc["reference"]["novelty"], *doc["reference"]["feature"], doc["shift_weight"],
                   doc["shift_threshold"]]
        if len(numbers) != 6 or not all(isinstance(v, int | float) and np.isfinite(v) for v in numbers):
            raise ValueError("the reference moments, weight and threshold must be finite numbers")
        if doc["reference"]["novelty"][1] <= 0 or doc["reference"]["feature"][1] <= 0:
            raise ValueError("a reference spread is not positive")
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"{where}: the operating point is damaged ({err}); refit the head "
                         "(fit-head)") from err
    return doc


def decide(head, X: np.ndarray, feature_score: np.ndarray | None = None) -> Decisions:
    """The product's decision for each row of concept vectors ``X`` (module docstring).

    Parameters
    ----------
    head : FERLHead
    X : ndarray of shape (n, k), float in [0, 1]
        Concept vectors in the head's concept order (calibrated when the head's inputs are).
    feature_score : ndarray of shape (n,) or None
        The images' feature typicality from the run's detector; None: unknown (its clean mean).

    Returns
    -------
    Decisions

    Raises
    ------
    ValueError
        Bad concept vectors, feature scores of another length or not finite.
    """
    X = head._check_X(np.asarray(X))
    features = _feature_scores(feature_score, X.shape[0], "decide")
    model = head.model_
    read = model.credal_readout(X, head.ood_kind, getattr(head, "coverage_", None))
    threshold = getattr(head, "ood_threshold_", None)
    flag = np.zeros(X.shape[0], dtype=bool) if threshold is None else read.ood_score > threshold["value"]
    point = getattr(head, "operating_", None)
    if point is None:
        sets = read.credal_set.copy()
        return Decisions(read.evidence, sets, sets.all(axis=1), read.ood_score, flag,
                         np.zeros(X.shape[0]), np.zeros(X.shape[0], dtype=bool), np.ones(X.shape[0]))
    adaptive = ShiftAdaptiveSets.from_dict(point["sets"])
    shift = _shift_score(point, read.ood_score, features)
    reliability = adaptive.reliability(shift)
    sets = adaptive.predict_set(read.evidence.plausibility, shift)
    abstained = sets.all(axis=1) | (sets.sum(axis=1) > point["max_set_size"])
    sets[abstained] = True
    return Decisions(discount_evidence(read.evidence, reliability), sets, abstained, read.ood_score, flag,
                     shift, shift > point["shift_threshold"], reliability)


def explain_decision(head, x: np.ndarray, feature_score: float | None = None,
                     top_k: int | None = 5) -> Explanation:
    """The explanation of one row at the product's operating point.

    The model's explanation (`ferl.FERLClassifier.explain`, its rules, sources and anomalous
    attributes in the head's kind of OOD score) with the decision's evidence: the discounted
    probabilities, beliefs, plausibilities and ignorance, the operating point's credal set and
    abstention, the discount's reliability, and the decision's certified radius in concept units
    (`certified_radius`).

    Parameters
    ----------
    head : FERLHead
    x : ndarray of shape (k,)
        One concept vector (calibrated when the head's inputs are).
    feature_score : float or None
        Its image's feature typicality (None: unknown).
    top_k : int or None
        Anomalous attributes listed.

    Raises
    ------
    ValueError
        Not one concept vector (several rows), bad concept values, or a feature score that is not
        one finite number.
    """
    shape = np.shape(x)
    if len(shape) not in (1, 2) or (len(shape) == 2 and shape[0] != 1):
        raise ValueError(f"explain_decision takes one concept vector, got an array of shape {shape}")
    x = head._check_X(np.asarray(x).reshape(1, -1) if len(shape) == 1 else x)
    base = head.model_.explain(x[0], top_k=top_k, kind=head.ood_kind, domain=CONCEPT_DOMAIN)
    if not _certifies_decision(head):
        base = replace(base, robustness_radius=0.0)
    dec = decide(head, x, None if feature_score is None else np.array([feature_score], dtype=np.float64))
    ev, classes = dec.evidence, base.classes
    return replace(base, probability=tuple(float(v) for v in ev.pignistic[0]),
                   belief=tuple(float(v) for v in ev.mass[0]),
                   plausibility=tuple(float(v) for v in ev.plausibility[0]), ignorance=float(ev.ignorance[0]),
                   credal_set=tuple(c for c, keep in zip(classes, dec.sets[0], strict=True) if keep),
                   abstain=bool(dec.abstained[0]), reliability=float(dec.reliability[0]))


def _certifies_decision(head) -> bool:
    """Whether the class the model's radius certifies is the one `decide` answers (`certified_radius`)."""
    model = head.model_
    if getattr(model, "evidence_weights_", None) is None or model.novelty_discount:
        return False
    point = getattr(head, "operating_", None)
    if point is None:
        return True
    lowest = float(np.exp(-ShiftAdaptiveSets.from_dict(point["sets"]).widening_.max()))
    return lowest >= DISCOUNT_FLOOR


def certified_radius(head, X: np.ndarray) -> np.ndarray:
    """The certified l_inf radius of each row's decision, in concept units (beyond the paper).

    Every concept vector of [0, 1]^k (`cbm.concepts.CONCEPT_DOMAIN`) whose concepts each differ
    from the row's by at most the radius gets the row's class from `decide` (whatever its image's
    feature score): the pignistic arg-max of the learned weights of evidence, the class `predict`
    answers, which the operating point's uniform discount keeps (the proof in
    `ferl.evidence.robustness`; `ferl.FERLClassifier.robustness_radius`). The units are those of
    the head's inputs: calibrated concept probabilities for a head fitted on calibrated concepts.
    0: nothing certified, and 0 for every row of a head whose certificate is not the decision's:
    the tree's evidence (compact, medium; the paper's radius bounds the class of the tree's
    ``P_T``, not the combined evidence's), a model with its own novelty discount, or an operating
    point whose lowest reliability is below `ferl.evidence.robustness.DISCOUNT_FLOOR`. ``inf``:
    every concept vector gets the class.

    Parameters
    ----------
    head : FERLHead
    X : ndarray of shape (n, k), float in [0, 1]
        Concept vectors in the head's concept order (calibrated when the head's inputs are).

    Returns
    -------
    ndarray of shape (n,), float64 >= 0

    Raises
    ------
    ValueError
        Bad concept vectors.
    """
    X = head._check_X(np.asarray(X))
    if not _certifies_decision(head):
        return np.zeros(X.shape[0])
    return head.model_.robustness_radius(X, domain=CONCEPT_DOMAIN)
