"""Leave-one-class-out novelty detection (paper §5.1 "Out-of-Distribution Detection", Table 3).

For a multiclass data set, one class at a time is removed from the fit and calibration parts of a
fold; detectors are fitted on the retained classes of the fit part, their acceptance threshold is
set to accept 95 % of the retained-class calibration inputs (the "validation" inputs), and they
are scored on the test fold: retained-class inputs are in-distribution, held-out-class inputs
are OOD (the positive class). Scores grow with novelty.

Dedicated detectors (same scaled features as FERL): class-conditional Mahalanobis distance with a
shared Ledoit-Wolf covariance (Lee et al. 2018), distance to the k-th nearest training neighbour
(k = 5, Sun et al. 2022) and Isolation Forest (Liu et al. 2008). FERL's own scores (`ferl_score`) are
every kind of `FERL_OOD_KINDS`: the product's default ``typical`` first, then the ablation kinds
(`ferl.benchmarks.ood_kinds`: its two parts ``leaf`` and ``prototype``, the other weightings ``nll``
and ``combined`` and the paper's ``residual`` and ``firing``) and the product's ``ignorance``; with
learned weights of evidence the product's ``energy``; plus ``ignorance-discounted``: the ignorance
m(Theta) of the same fitted model with ``novelty_discount`` on. A model without ``ood_score`` is
skipped and reported.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import clone
from sklearn.covariance import LedoitWolf
from sklearn.ensemble import IsolationForest
from sklearn.neighbors import NearestNeighbors

from ferl import metrics as M
from ferl.benchmarks.confidence import BETP_KINDS, ConfidenceDetector, confidence_score
from ferl.benchmarks.ood_kinds import ABLATION_KINDS, ablation_score
from ferl.benchmarks.protocol import FoldData
from ferl.novelty.discount import discounting

__all__ = [
    "ferl_score",
    "DETECTORS",
    "FERL_OOD_KINDS",
    "IsolationForestDetector",
    "KNNDetector",
    "MahalanobisDetector",
    "holdout_classes",
    "run_leave_one_class_out",
]

#: FERL novelty kinds evaluated (`ferl_score`: the product's and the ablations'); the discounted
#: ignorance is added as ``"ignorance-discounted"``, ``"energy"`` for learned weights of evidence.
FERL_OOD_KINDS = ("typical", "leaf", "prototype", "nll", "combined", "residual", "ignorance", "firing")
#: Name of the ignorance with ``novelty_discount`` on.
DISCOUNTED = "ignorance-discounted"


class MahalanobisDetector:
    """Smallest class-conditional Mahalanobis distance under a shared shrunk covariance.

    The covariance is the Ledoit-Wolf estimate of the class-centred training features (Lee et al.
    2018). The distances are computed in whitened coordinates: ``L`` is the Cholesky factor of the
    precision (``P = L L^T``), so ``(x - mu)^T P (x - mu) = ||(x - mu) L||^2``, one matrix product
    per batch instead of one per class.
    """

    def fit(self, X: np.ndarray, y: np.ndarray) -> MahalanobisDetector:
        """Fit on features ``X`` (n, d) and labels ``y`` (n,)."""
        X = np.asarray(X, dtype=np.float64)
        classes = np.unique(y)
        self.means_ = np.stack([X[y == c].mean(axis=0) for c in classes])
        centred = X - self.means_[np.searchsorted(classes, y)]
        self.precision_ = LedoitWolf().fit(centred).precision_
        self.whiten_ = np.linalg.cholesky(self.precision_)
        return self

    def score(self, X: np.ndarray) -> np.ndarray:
        """Squared distance to the closest class mean, float64 of shape (n,), ``>= 0``."""
        white = np.asarray(X, dtype=np.float64) @ self.whiten_
        means = self.means_ @ self.whiten_
        sq = (white ** 2).sum(axis=1)[:, None] - 2.0 * white @ means.T + (means ** 2).sum(axis=1)[None, :]
        return np.maximum(sq.min(axis=1), 0.0)


class KNNDetector:
    """Euclidean distance to the ``k``-th nearest training input.

    Parameters
    ----------
    k : int, default=5
    """

    def __init__(self, k: int = 5) -> None:
        self.k = k

    def fit(self, X: np.ndarray, y: np.ndarray | None = None) -> KNNDetector:
        """Index the training inputs ``X`` (n, d); ``y`` is ignored."""
        self.nn_ = NearestNeighbors(n_neighbors=min(self.k, X.shape[0])).fit(X)
        return self

    def score(self, X: np.ndarray) -> np.ndarray:
        """Distance to the k-th neighbour, shape (n,)."""
        return self.nn_.kneighbors(X)[0][:, -1]


class IsolationForestDetector:
    """Isolation Forest anomaly score (``-score_samples``: higher = more anomalous).

    Parameters
    ----------
    seed : int, default=0
    """

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def fit(self, X: np.ndarray, y: np.ndarray | None = None) -> IsolationForestDetector:
        """Fit 100 isolation trees on ``X`` (n, d); ``y`` is ignored."""
        self.forest_ = IsolationForest(n_estimators=100, random_state=self.seed).fit(X)
        return self

    def score(self, X: np.ndarray) -> np.ndarray:
        """Anomaly score, shape (n,)."""
        return -self.forest_.score_samples(X)


DETECTORS = {
    "mahalanobis": ("Mahalanobis", lambda seed: MahalanobisDetector()),
    "knn": ("kNN (k=5)", lambda seed: KNNDetector(5)),
    "iforest": ("Isolation Forest", lambda seed: IsolationForestDetector(seed)),
    "lr-msp": ("LR 1 − max p", lambda seed: ConfidenceDetector("msp")),
    "lr-entropy": ("LR entropy", lambda seed: ConfidenceDetector("entropy")),
    "lr-energy": ("LR energy", lambda seed: ConfidenceDetector("energy")),
}


def holdout_classes(n_classes: int, max_classes: int | None, seed: int) -> list[int]:
    """Classes held out in turn: all of them, or ``max_classes`` drawn with ``seed``.

    Parameters
    ----------
    n_classes : int
    max_classes : int or None
    seed : int

    Returns
    -------
    list of int
        Sorted class indices.
    """
    if max_classes is None or max_classes >= n_classes:
        return list(range(n_classes))
    rng = np.random.default_rng(seed)
    return sorted(rng.choice(n_classes, size=max_classes, replace=False).tolist())


def run_leave_one_class_out(
    data: FoldData,
    ferl_models: dict,
    seed: int,
    max_classes: int | None = None,
) -> tuple[list[dict], set[str]]:
    """Leave-one-class-out OOD evaluation on one fold.

    Parameters
    ----------
    data : FoldData
        Scaled fold of a data set with at least 3 classes.
    ferl_models : dict of str to estimator
        Unfitted FERL estimators by method name (refitted on the retained classes).
    seed : int
    max_classes : int, optional
        Hold out at most this many classes (drawn with ``seed``); ``None``: every class.

    Returns
    -------
    rows : list of dict
        ``{"holdout": c, "detector": name, "auroc", "aupr_out", "fpr95", "reject", "accept_id"}``.
    skipped : set of str
        ``"<method>:<kind>"`` FERL scores that raised ``AttributeError`` (not yet available).

    Raises
    ------
    ValueError
        Fewer than 3 classes.
    """
    if data.n_classes < 3:
        raise ValueError("leave-one-class-out needs at least 3 classes")
    rows, skipped = [], set()
    for held in holdout_classes(data.n_classes, max_classes, seed):
        keep_fit, keep_cal = data.y_fit != held, data.y_cal != held
        X_fit, y_fit = data.X_fit[keep_fit], data.y_fit[keep_fit]
        X_val = data.X_cal[keep_cal]
        X_id, X_ood = data.X_test[data.y_test != held], data.X_test[data.y_test == held]
        if X_ood.shape[0] == 0 or X_id.shape[0] == 0:
            continue
        for name, (_, build) in DETECTORS.items():
            det = build(seed).fit(X_fit, y_fit)
            row = M.ood_summary(det.score(X_val), det.score(X_id), det.score(X_ood))
            rows.append({"holdout": held, "detector": name, **row})
        for method, estimator in ferl_models.items():
            model = clone(estimator).fit(X_fit, y_fit)
            for kind in (*FERL_OOD_KINDS, "energy", DISCOUNTED, *BETP_KINDS):
                if kind == "energy" and getattr(model, "evidence_weights_", None) is None:
                    continue  # the tree's evidence has no weights of evidence
                try:
                    s_val, s_id, s_ood = (ferl_score(model, X, kind) for X in (X_val, X_id, X_ood))
                except AttributeError:
                    skipped.add(f"{method}:{kind}")
                    continue
                row = M.ood_summary(np.asarray(s_val), np.asarray(s_id), np.asarray(s_ood))
                rows.append({"holdout": held, "detector": f"{method}:{kind}", **row})
    return rows, skipped


def ferl_score(model, X: np.ndarray, kind: str) -> np.ndarray:
    """``model.ood_score(X, kind)``, or `ferl.benchmarks.ood_kinds.ablation_score` for an ablation kind;
    `DISCOUNTED`: the ignorance with ``novelty_discount`` on.

    Parameters
    ----------
    model : FERLClassifier
        A fitted model (left with its own ``novelty_discount``).
    X : ndarray of shape (n_samples, n_features)
    kind : str
        One of `ferl.novelty.ood_score.OOD_KINDS` (the product's), `ferl.benchmarks.ood_kinds.ABLATION_KINDS`,
        `DISCOUNTED`, or FERL's class evidence read as a confidence score
        (`ferl.benchmarks.confidence.BETP_KINDS`).

    Returns
    -------
    ndarray of shape (n_samples,), float64

    Raises
    ------
    AttributeError
        `DISCOUNTED` for a model without ``novelty_discount``.
    ValueError
        An unknown ``kind``.
    """
    if kind in BETP_KINDS:
        return confidence_score(model.predict_proba(X), kind.removeprefix("betp-"))
    if kind in ABLATION_KINDS:
        return ablation_score(model, X, kind)
    if kind != DISCOUNTED:
        return model.ood_score(X, kind=kind)
    with discounting(model):
        return ablation_score(model, X, "ignorance")
