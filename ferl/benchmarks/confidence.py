"""A classifier's own confidence as a novelty score: the open-set baselines a user would try first.

A good closed-set classifier's confidence is a strong novelty score (Vaze et al. 2022, "Open-set
recognition: a good closed-set classifier is all you need"), so every open-world table puts these
beside the dedicated detectors: a multinomial logistic regression on the same inputs (scikit-learn,
``max_iter=3000``) scored by ``1 - max_c p(c)`` (maximum softmax probability, Hendrycks & Gimpel
2017), by the entropy of ``p`` and by the negative energy ``-log sum_c exp(logit_c)`` (Liu et al.
2020); and FERL's own class evidence read the same way (`BETP_KINDS`: ``1 - max BetP`` and the
entropy of BetP). Higher means more novel, as for every detector.
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy.special import logsumexp
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression

__all__ = ["BETP_KINDS", "CONFIDENCE_KINDS", "ConfidenceDetector", "confidence_score"]

#: Scores of a probability vector: ``msp`` = 1 - max p, ``entropy`` = -sum p log p.
CONFIDENCE_KINDS = ("msp", "entropy", "energy")
#: FERL's class evidence read as a confidence score (``ferl.benchmarks.ood.ferl_score`` kinds).
BETP_KINDS = ("betp-msp", "betp-entropy")


def confidence_score(proba: np.ndarray, kind: str) -> np.ndarray:
    """``1 - max p`` (``"msp"``) or the entropy ``-sum p log p`` (``"entropy"``) of each row of
    ``proba`` (n, C), shape (n,); ValueError for another kind."""
    if kind == "msp":
        return 1.0 - proba.max(axis=1)
    if kind == "entropy":
        p = np.clip(proba, 1e-300, 1.0)
        return -(proba * np.log(p)).sum(axis=1)
    raise ValueError(f"unknown confidence score {kind!r}; expected 'msp' or 'entropy'")


class ConfidenceDetector:
    """Logistic regression's confidence as a novelty score.

    Parameters
    ----------
    kind : {"msp", "entropy", "energy"}
    """

    def __init__(self, kind: str = "msp") -> None:
        if kind not in CONFIDENCE_KINDS:
            raise ValueError(f"unknown confidence score {kind!r}; expected one of {list(CONFIDENCE_KINDS)}")
        self.kind = kind

    def fit(self, X: np.ndarray, y: np.ndarray) -> ConfidenceDetector:
        """Fit the logistic regression on ``X`` (n, d) and the class labels ``y`` (n,)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            self.model_ = LogisticRegression(max_iter=3000).fit(X, y)
        return self

    def score(self, X: np.ndarray) -> np.ndarray:
        """Novelty score, shape (n,): higher = less confident."""
        if self.kind == "energy":
            logits = self.model_.decision_function(X)
            logits = np.stack([-logits / 2, logits / 2], axis=1) if logits.ndim == 1 else logits
            return -logsumexp(logits, axis=1)
        return confidence_score(self.model_.predict_proba(X), self.kind)
