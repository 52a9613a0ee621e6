"""Out-of-distribution detection metrics (paper §4.1, Table 3; torch-free).

AUROC, AUPR-Out, FPR at 95 % TPR, and rejection at a threshold that accepts 95 % of
in-distribution validation inputs. **OOD is the positive class** and scores **grow with novelty**;
rates are fractions in ``[0, 1]``. Every metric raises ``ValueError`` on empty inputs, NaN/inf, or
when only one kind of sample is given. Re-exported by `ferl.metrics.classification`, with the point and set
metrics.
"""

from __future__ import annotations

import math

import numpy as np
from sklearn.metrics import average_precision_score, roc_auc_score

from ferl.metrics.checks import finite_1d

__all__ = ["aupr_out", "fit_acceptance_threshold", "fpr_at_95_tpr", "ood_auroc", "ood_summary",
           "rejection_rate"]


def _ood_pair(scores_id: np.ndarray, scores_ood: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return finite_1d(scores_id, "scores_id"), finite_1d(scores_ood, "scores_ood")


def _ood_labels_scores(scores_id: np.ndarray, scores_ood: np.ndarray) -> tuple[np.ndarray, ...]:
    s_id, s_ood = _ood_pair(scores_id, scores_ood)
    labels = np.r_[np.zeros(s_id.size), np.ones(s_ood.size)]
    return labels, np.r_[s_id, s_ood]


def ood_auroc(scores_id: np.ndarray, scores_ood: np.ndarray) -> float:
    """Area under the ROC curve with OOD as the positive class (ties count one half).

    Parameters
    ----------
    scores_id : ndarray of shape (n_id,), float
        Novelty scores of in-distribution inputs (higher = more novel).
    scores_ood : ndarray of shape (n_ood,), float
        Novelty scores of OOD inputs.

    Returns
    -------
    float
        AUROC in ``[0, 1]``; negating both score arrays gives ``1 - AUROC``.

    Raises
    ------
    ValueError
        An empty array (only one kind of sample) or NaN/inf scores.
    """
    labels, scores = _ood_labels_scores(scores_id, scores_ood)
    return float(roc_auc_score(labels, scores))


def aupr_out(scores_id: np.ndarray, scores_ood: np.ndarray) -> float:
    """Area under the precision-recall curve with OOD as the positive class (AUPR-Out).

    Computed as scikit-learn's average precision (step-wise, no interpolation). Parameters and
    errors as in :func:`ood_auroc`.

    Returns
    -------
    float
        AUPR-Out in ``[0, 1]``; a random detector scores about ``n_ood / (n_id + n_ood)``.
    """
    labels, scores = _ood_labels_scores(scores_id, scores_ood)
    return float(average_precision_score(labels, scores))


def fpr_at_95_tpr(scores_id: np.ndarray, scores_ood: np.ndarray) -> float:
    """False-positive rate at 95 % true-positive rate (FPR95), OOD positive.

    The threshold ``t`` is the ``k``-th largest OOD score with ``k = ceil(0.95 * n_ood)``, i.e. the
    largest threshold for which the rule "flag as OOD when score >= t" flags at least 95 % of the
    OOD inputs. FPR95 is the fraction of in-distribution inputs whose score is ``>= t``. Parameters
    and errors as in :func:`ood_auroc`.

    Returns
    -------
    float
        FPR95 in ``[0, 1]`` (lower is better).
    """
    s_id, s_ood = _ood_pair(scores_id, scores_ood)
    k = math.ceil(0.95 * s_ood.size - 1e-9)
    threshold = np.sort(s_ood)[::-1][k - 1]
    return float(np.mean(s_id >= threshold))


def fit_acceptance_threshold(scores_id_val: np.ndarray, accept: float = 0.95) -> float:
    """Novelty threshold that accepts a fraction ``accept`` of in-distribution validation inputs.

    Returns the ``k``-th smallest validation score with ``k = ceil(accept * n)``: the rule
    "accept when score <= t" accepts at least ``accept`` of the validation inputs (paper Table 3,
    "Reject" column, with ``accept = 0.95``).

    Parameters
    ----------
    scores_id_val : ndarray of shape (n_val,), float
        Novelty scores of in-distribution validation inputs (higher = more novel).
    accept : float in (0, 1], default=0.95

    Returns
    -------
    float
        The threshold ``t``; apply it with :func:`rejection_rate`.

    Raises
    ------
    ValueError
        Empty or non-finite scores, ``accept`` outside ``(0, 1]``.
    """
    scores = finite_1d(scores_id_val, "scores_id_val")
    if not 0.0 < accept <= 1.0:
        raise ValueError(f"accept must be in (0, 1], got {accept}")
    k = max(1, math.ceil(accept * scores.size - 1e-9))
    return float(np.sort(scores)[k - 1])


def rejection_rate(scores: np.ndarray, threshold: float) -> float:
    """Fraction of inputs rejected (score strictly above ``threshold``).

    Parameters
    ----------
    scores : ndarray of shape (n,), float
        Novelty scores, e.g. of held-out-class (OOD) test inputs.
    threshold : float
        From :func:`fit_acceptance_threshold`.

    Returns
    -------
    float
        Rejection rate in ``[0, 1]``.

    Raises
    ------
    ValueError
        Empty or non-finite scores, non-finite threshold.
    """
    s = finite_1d(scores, "scores")
    if not math.isfinite(threshold):
        raise ValueError(f"threshold must be finite, got {threshold}")
    return float(np.mean(s > threshold))


def ood_summary(scores_val: np.ndarray, scores_id: np.ndarray, scores_ood: np.ndarray,
                accept: float = 0.95) -> dict[str, float]:
    """Table 5's metrics of one score (OOD positive, scores grow with novelty).

    Parameters
    ----------
    scores_val : ndarray of shape (n_val,)
        Retained-class validation scores: the threshold accepts ``accept`` of them.
    scores_id, scores_ood : ndarray of shape (n_id,) and (n_ood,)
        Retained-class and held-out-class test scores.
    accept : float

    Returns
    -------
    dict
        ``auroc``, ``aupr_out``, ``fpr95``, ``reject`` (held-out test inputs rejected),
        ``accept_id`` (retained test inputs accepted), ``threshold``; rates are fractions.

    Raises
    ------
    ValueError
        Empty or non-finite scores.
    """
    t = fit_acceptance_threshold(scores_val, accept)
    return {"auroc": ood_auroc(scores_id, scores_ood), "aupr_out": aupr_out(scores_id, scores_ood),
            "fpr95": fpr_at_95_tpr(scores_id, scores_ood), "reject": rejection_rate(scores_ood, t),
            "accept_id": 1.0 - rejection_rate(scores_id, t), "threshold": t}
