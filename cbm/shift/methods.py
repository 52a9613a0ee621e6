"""The methods ``evaluate-shift`` compares, on the same concept vectors of the same images.

Set predictors (each row: a class, a set, an abstention, and a shift score for detection):

* ``product``: the FERL head ``predict`` uses, at its operating point (`cbm.heads.operating.decide`,
  the detector's feature typicality included); the other FERL presets the same way;
* ``<head>-ds-conformal``: the product's head with the paper's DS-conformal set at the same coverage,
  calibrated on clean val and never widened (what the product did before its sets read the shift);
  its shift score is the head's own novelty score;
* ``lr-lac``, ``lr-aps``, ``lr-raps``: the run's logistic regression with split-conformal sets
  (`ferl.evidence.conformal.SplitConformal`: LAC, and APS and RAPS in their randomised form, which
  reaches the target coverage where the deterministic one over-covers with wide sets) calibrated on
  the clean val rows (calibrated out of sample, as the FERL heads' are); shift score ``1 - max p``
  (MSP). ``lr-raps-nonempty``: RAPS with the top class kept in every set (its authors' code's
  default), which covers more than the target on clean inputs with wider sets.

Shift detectors only (no set): ``lr-energy`` (the logistic regression's negative energy),
``mahalanobis-concepts`` (class-conditional Mahalanobis on the concept vectors, fitted on the train
concepts the heads read) and ``mahalanobis-features`` (the detector's feature typicality, a tied
Mahalanobis on its penultimate features: the DDU-style baseline).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp

from cbm.concepts.calibration import crossfit_calibrate
from cbm.heads.operating import decide
from cbm.heads.train_concepts import crossfit_table
from cbm.shift.images import ShiftRun
from ferl import metrics as M
from ferl.benchmarks.ood import MahalanobisDetector
from ferl.evidence.conformal import SplitConformal

__all__ = ["DETECTORS", "Outputs", "ShiftMethods", "cell_metrics"]

#: Shift detectors without a set.
DETECTORS = ("lr-energy", "mahalanobis-concepts", "mahalanobis-features")
#: Set method -> (score, randomised, empty sets allowed).
_CONFORMAL = {"lr-lac": ("lac", False, False), "lr-aps": ("aps", True, True), "lr-raps": ("raps", True, True),
              "lr-raps-nonempty": ("raps", True, False)}


@dataclass(frozen=True)
class Outputs:
    """One method's outputs on ``n`` rows: ``proba`` (n, C) and ``sets`` (n, C) bool (None for a
    detector), ``abstained`` (n,) bool, ``shift_score`` (n,) float64 (higher: more shifted)."""

    proba: np.ndarray | None
    sets: np.ndarray | None
    abstained: np.ndarray | None
    shift_score: np.ndarray


class ShiftMethods:
    """Every method of the module docstring, fitted on a run's clean tables.

    Parameters
    ----------
    run : ShiftRun
    product : str
        The product's head (a key of ``run.heads``).
    presets : sequence of str
        The other FERL heads.
    inputs : {"calibrated", "raw"}
    """

    def __init__(self, run: ShiftRun, product: str, presets, inputs: str) -> None:
        self.run, self.product, self.presets, self.inputs = run, product, list(presets), inputs
        head = run.heads[product]
        coverage = (head.operating_ or {}).get("coverage", head.coverage_ or 0.9)
        val, train = run.tables["val"], run.tables["train"]
        names = train.concept_names
        X_val = (crossfit_calibrate(val.probs, val.concept_labels, names, seed=run.seed)
                 if inputs == "calibrated" else val.probs.astype(np.float64))
        lr = run.heads["lr"]
        seen = np.isin(np.asarray(val.class_names)[val.y], lr.classes_)
        y_val = lr.class_index(np.asarray(val.class_names)[val.y[seen]])
        proba_val = np.clip(lr.predict_proba(X_val[seen]), 0.0, 1.0)
        self.conformal = {m: SplitConformal(1.0 - coverage, score, randomized=randomized,
                                            random_state=run.seed, allow_empty=empty).fit(proba_val, y_val)
                          for m, (score, randomized, empty) in _CONFORMAL.items()}
        crossfit = crossfit_table(run.run_dir, train)
        source = crossfit if crossfit is not None else train
        self.mahalanobis = MahalanobisDetector().fit(run.concepts(source.probs, inputs), source.y)
        self.coverage = coverage

    @property
    def names(self) -> list[str]:
        """Every method, set predictors first."""
        return ["product", *self.presets, f"{self.product}-ds-conformal", *_CONFORMAL, *DETECTORS]

    def outputs(self, probs: np.ndarray, feature_score: np.ndarray) -> dict[str, Outputs]:
        """Every method's outputs on detector probabilities ``probs`` (n, k) with feature scores (n,)."""
        X = self.run.concepts(probs, self.inputs)
        out = {}
        for name, key in (("product", self.product), *((p, p) for p in self.presets)):
            dec = decide(self.run.heads[key], X, feature_score)
            out[name] = Outputs(dec.evidence.pignistic, dec.sets, dec.abstained, dec.shift_score)
        head = self.run.heads[self.product]
        read = head.model_.credal_readout(X, head.ood_kind, self.coverage)
        out[f"{self.product}-ds-conformal"] = Outputs(read.evidence.pignistic, read.credal_set,
                                                       read.credal_set.all(axis=1), read.ood_score)
        lr = self.run.heads["lr"]
        proba = np.clip(lr.predict_proba(X), 0.0, 1.0)
        for name, cp in self.conformal.items():
            sets = cp.predict_set(proba)
            out[name] = Outputs(proba, sets, sets.all(axis=1), 1.0 - proba.max(axis=1))
        logits = lr.model_.decision_function(X)
        out["lr-energy"] = Outputs(None, None, None, -logsumexp(np.atleast_2d(logits), axis=1))
        out["mahalanobis-concepts"] = Outputs(None, None, None, self.mahalanobis.score(X))
        out["mahalanobis-features"] = Outputs(None, None, None, np.asarray(feature_score, dtype=np.float64))
        return out


def cell_metrics(outputs: Outputs, y: np.ndarray, clean_score: np.ndarray | None) -> dict[str, float]:
    """The shift table's columns of one method on one cell (class indices ``y`` (n,) in the method's
    columns; ``clean_score``: the method's shift scores on the clean test rows, None at severity 0).

    ``set_size`` is the mean size of the sets that are not abstentions and ``answered_right`` the
    share of rows answered with a set that holds the class; ``detect_auroc`` the clean-vs-this-cell
    AUROC of the shift score (shifted rows positive). NaN where a column does not apply.
    """
    nan = float("nan")
    out = {"n": int(y.size)}
    if outputs.sets is not None:
        proba, sets, abstained = outputs.proba, outputs.sets, outputs.abstained
        pred = proba.argmax(axis=1)
        hit = sets[np.arange(y.size), y]
        kept = ~abstained
        out |= {"accuracy": M.accuracy(y, pred), "ece": M.expected_calibration_error(y, np.clip(proba, 0, 1)),
                "aurc": M.aurc(y, pred, proba.max(axis=1)), "coverage": float((hit | abstained).mean()),
                "set_size": float(sets[kept].sum(axis=1).mean()) if kept.any() else nan,
                "abstention": float(abstained.mean()), "answered_right": float((hit & kept).mean())}
    else:
        out |= dict.fromkeys(("accuracy", "ece", "aurc", "coverage", "set_size", "abstention",
                              "answered_right"), nan)
    out["detect_auroc"] = nan if clean_score is None else M.ood_auroc(clean_score, outputs.shift_score)
    return out
