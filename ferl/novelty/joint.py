"""The ``joint`` OOD score: an input's typicality and its class evidence, read together (beyond the
paper).

Two signals catch different novel inputs. The ``typical`` score (`ferl.novelty.prototypes`) asks
how far an input's concepts lie from the training rows its rules cover; the learned weights of
evidence's ``energy`` (`ferl.evidence.weights.evidence_energy`) asks how little evidence the input
gives any class. On real concept vectors the second ranks held-out classes well and the first
poorly; on the synthetic world the reverse. ``joint`` standardises each on held-out in-distribution
inputs (mean and standard deviation, `fit_reference`) and sums them, so neither scale dominates:

    ``joint(x) = (t(x) - mu_t) / sd_t + (e(x) - mu_e) / sd_e``.

Equal weights, chosen by measurement rather than fitted: the open-world runs hold no held-out
class at calibration time, and a weight tuned on their test folds would not generalise. Fisher's
sum of the two tail probabilities was the alternative measured; it ranked held-out classes
slightly worse on both worlds (docs/results/novelty.md, "The product's score").
"""

from __future__ import annotations

import numpy as np

__all__ = ["MIN_SPREAD", "fit_reference", "joint_score", "spread_ok"]

#: The least standard deviation, relative to the score's scale, that the reference may have.
MIN_SPREAD = 1e-6


def fit_reference(typical: np.ndarray, energy: np.ndarray) -> np.ndarray:
    """``(mu_t, sd_t, mu_e, sd_e)`` of held-out in-distribution inputs' scores.

    Parameters
    ----------
    typical, energy : ndarray of shape (m,), float64, finite, ``m >= 2``
        The ``typical`` and ``energy`` scores of the held-out inputs.

    Returns
    -------
    ndarray of shape (4,), float64; both standard deviations above `MIN_SPREAD` times the score's
    scale.

    Raises
    ------
    ValueError
        Fewer than two inputs, arrays of other shapes, non-finite scores, or a score without spread
        among the inputs (identical rows: its standardisation would blow up).
    """
    t, e = np.asarray(typical, dtype=np.float64), np.asarray(energy, dtype=np.float64)
    if t.ndim != 1 or t.shape != e.shape or t.size < 2:
        raise ValueError(f"fit_reference needs two 1-d arrays of one length >= 2, got {t.shape} and "
                         f"{e.shape}")
    if not (np.isfinite(t).all() and np.isfinite(e).all()):
        raise ValueError("fit_reference needs finite scores")

    reference = np.array([t.mean(), t.std(), e.mean(), e.std()])
    if not spread_ok(reference):
        raise ValueError("the held-out inputs give the typical or the energy score no spread (identical "
                         "rows?): calibrate on varied in-distribution inputs, e.g. the validation split")
    return reference


def spread_ok(reference: np.ndarray) -> bool:
    """Whether both standard deviations of ``(mu_t, sd_t, mu_e, sd_e)`` exceed `MIN_SPREAD` times
    their score's scale (``max(|mu|, 1)``)."""
    mu, sd = reference[[0, 2]], reference[[1, 3]]
    return bool(np.all(sd > MIN_SPREAD * np.maximum(np.abs(mu), 1.0)))


def joint_score(typical: np.ndarray, energy: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """``(t - mu_t) / sd_t + (e - mu_e) / sd_e`` of the module docstring.

    Parameters
    ----------
    typical, energy : ndarray of shape (n,), float64
    reference : ndarray of shape (4,)
        `fit_reference`'s ``(mu_t, sd_t, mu_e, sd_e)``.

    Returns
    -------
    ndarray of shape (n,), float64, finite for finite inputs; higher means more novel.
    """
    return (typical - reference[0]) / reference[1] + (energy - reference[2]) / reference[3]
