"""FERL-deep ablations on the benchmark folds (paper appendix C, Tables 8, 9 and 10).

* Evidence sources and combination rule (C.1, Table 8): the same fitted tree read out with
  leaves-only or all-node evidence under Dempster's rule, and with Denoeux's cautious rule.
* Bounded-support gate (C.2, Table 9): the gate toggled at inference; in-distribution accuracy,
  coverage and set size, and geometric-OOD AUROC of the firing score (an ablation kind,
  `ferl.benchmarks.ood_kinds`). Geometric
  OOD inputs are the test inputs moved off the training support: every scaled feature is shifted
  by ``s * (2 + u)`` feature ranges, ``s`` a random sign and ``u ~ U(0, 1)``.
* Split criterion (C.3, Table 10): FERL-deep refitted with CCI instead of weighted Gini.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
from sklearn.base import clone

from ferl import metrics as M
from ferl.benchmarks.methods import ferl_evidence_param
from ferl.benchmarks.ood_kinds import ablation_score
from ferl.benchmarks.protocol import FoldData

__all__ = ["READOUTS", "geometric_ood", "run_ablations"]

#: Table 8 read-outs: name -> (evidence sources, combination rule).
READOUTS = {
    "all-nodes/dempster": ("all", "dempster"),
    "leaves/dempster": ("leaves", "dempster"),
    "leaves/cautious": ("leaves", "cautious"),
}


@contextmanager
def _params(model, **params) -> Iterator[None]:
    """Temporarily set inference-time parameters of a fitted FERL model."""
    old = {k: v for k, v in model.get_params().items() if k in params}
    model.set_params(**params)
    try:
        yield
    finally:
        model.set_params(**old)


def geometric_ood(X: np.ndarray, seed: int) -> np.ndarray:
    """Move min-max-scaled inputs off the training support.

    Parameters
    ----------
    X : ndarray of shape (n, d), float
        Scaled in-distribution inputs (training range about ``[0, 1]`` per feature).
    seed : int

    Returns
    -------
    ndarray of shape (n, d)
        ``X + s * (2 + u)`` with random signs ``s`` and ``u ~ U(0, 1)`` per entry.
    """
    rng = np.random.default_rng(seed)
    sign = rng.choice([-1.0, 1.0], size=X.shape)
    return X + sign * (2.0 + rng.random(X.shape))


def _readout(model, X: np.ndarray, y: np.ndarray) -> dict[str, float]:
    ev = model.evidence(X)
    proba = np.asarray(model.predict_proba(X))
    sets = np.asarray(model.predict_set(X), dtype=bool)
    pred = proba.argmax(axis=1)
    return {
        "accuracy": M.accuracy(y, pred),
        "aurc": M.aurc(y, pred, proba.max(axis=1)),
        "ece": M.expected_calibration_error(y, np.clip(proba, 0.0, 1.0)),
        "ignorance": float(np.mean(ev.ignorance)),
        "determinacy": M.determinacy(sets),
        "coverage": M.coverage(y, sets),
        "set_size": M.mean_set_size(sets),
        "u65": M.u65(y, sets),
    }


def _firing_auroc(model, X_id: np.ndarray, X_ood: np.ndarray) -> float:
    try:
        return M.ood_auroc(ablation_score(model, X_id, "firing"), ablation_score(model, X_ood, "firing"))
    except AttributeError:  # novelty scores not available yet
        return float("nan")


def run_ablations(
    model, data: FoldData, seed: int, refit_cci: bool = True
) -> list[dict[str, float | str]]:
    """All FERL-deep ablations on one fold.

    Parameters
    ----------
    model : FERLClassifier
        FERL-deep fitted on ``data.X_fit`` (left unchanged on return).
    data : FoldData
    seed : int
        Seeds the geometric-OOD inputs and the CCI refit.
    refit_cci : bool, default=True
        Refit with ``gain="gini"`` (unless ``model`` has it) and ``gain="cci"`` for Table 10.

    Returns
    -------
    list of dict
        Rows with ``study`` ("readout", "gate" or "gain"), ``variant`` and metric columns
        (``nan`` where a metric does not apply or a FERL score is unavailable).
    """
    evidence_param = ferl_evidence_param(model)
    X, y = data.X_test, data.y_test
    rows: list[dict[str, float | str]] = []
    for name, (sources, rule) in READOUTS.items():
        with _params(model, **{evidence_param: sources, "combination": rule}):
            rows.append({"study": "readout", "variant": name, **_readout(model, X, y)})
    X_geo = geometric_ood(X, seed)
    for gate in (False, True):
        with _params(model, bounded_support=gate):
            row = _readout(model, X, y)
            ign_id, ign_ood = model.evidence(X).ignorance, model.evidence(X_geo).ignorance
            row["ignorance_auroc"] = M.ood_auroc(np.asarray(ign_id), np.asarray(ign_ood))
            row["firing_auroc"] = _firing_auroc(model, X, X_geo)
        rows.append({"study": "gate", "variant": "on" if gate else "off", **row})
    if refit_cci:
        for gain in ("gini", "cci"):  # the paper's two criteria, whatever the preset's
            fitted = model if model.get_params()["gain"] == gain else clone(model).set_params(
                gain=gain).fit(data.X_fit, data.y_fit)
            rows.append({"study": "gain", "variant": gain, **_readout(fitted, X, y)})
    return rows
