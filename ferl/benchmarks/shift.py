"""Prediction sets under graded covariate shift (paper appendix F, Figure 4).

Both set predictors wrap the same fitted FERL model and are calibrated in distribution on the
calibration part at ``alpha = 0.1``: FERL "DS-conformal" thresholds the true-class Dempster-Shafer
plausibility, global split conformal thresholds ``1 - p_y`` (pignistic probability). Test
features are then perturbed as ``x_f + k * sigma_f * eps_f`` with ``sigma_f`` the fit-part
standard deviation of scaled feature ``f`` and ``eps_f ~ N(0, 1)`` (one draw per fold, reused for
every ``k``, so the curves are paired across ``k``).
"""

from __future__ import annotations

import numpy as np

from ferl import metrics as M
from ferl.benchmarks.protocol import FoldData
from ferl.evidence.conformal import SplitConformal

__all__ = ["SHIFT_LEVELS", "SHIFT_METHODS", "run_covariate_shift"]

SHIFT_LEVELS = (0.0, 0.25, 0.5, 1.0, 1.5, 2.0)
#: Set predictor name -> (conformal score, read-out of the FERL model).
SHIFT_METHODS = {"ferl-ds-conformal": "plausibility", "split-conformal": "lac"}


def _values(model, X: np.ndarray, score: str) -> np.ndarray:
    if score == "plausibility":
        return np.clip(np.asarray(model.evidence(X).plausibility), 0.0, 1.0)
    return np.clip(np.asarray(model.predict_proba(X)), 0.0, 1.0)


def run_covariate_shift(
    model,
    data: FoldData,
    seed: int,
    levels: tuple[float, ...] = SHIFT_LEVELS,
    alpha: float = 0.1,
) -> list[dict[str, float | str]]:
    """Coverage and set size of DS-conformal and global split conformal at each shift level.

    Parameters
    ----------
    model : FERLClassifier
        Fitted on ``data.X_fit`` with every class present.
    data : FoldData
    seed : int
        Seeds the noise ``eps``.
    levels : tuple of float, default=(0, 0.25, 0.5, 1, 1.5, 2)
        Shift magnitudes ``k``.
    alpha : float, default=0.1

    Returns
    -------
    list of dict
        ``{"k", "method", "coverage", "set_size", "accuracy"}`` per level and set predictor.
    """
    predictors = {
        name: SplitConformal(alpha, score).fit(_values(model, data.X_cal, score), data.y_cal)
        for name, score in SHIFT_METHODS.items()
    }
    sigma = data.X_fit.std(axis=0)
    eps = np.random.default_rng(seed).standard_normal(data.X_test.shape)
    rows = []
    for k in levels:
        X = data.X_test + k * sigma * eps
        accuracy = M.accuracy(data.y_test, np.asarray(model.predict_proba(X)).argmax(axis=1))
        for name, score in SHIFT_METHODS.items():
            sets = predictors[name].predict_set(_values(model, X, score))
            rows.append(
                {
                    "k": float(k),
                    "method": name,
                    "coverage": M.coverage(data.y_test, sets),
                    "set_size": M.mean_set_size(sets),
                    "accuracy": accuracy,
                }
            )
    return rows
