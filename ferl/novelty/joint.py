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

__all__ = ["fit_reference", "joint_score"]


def fit_reference(typical: np.ndarray, energy: np.ndarray) -> np.ndarray:
    """``(mu_t, sd_t, mu_e, sd_e)`` of held-out in-distribution inputs' scores.

    Parameters
    ----------
    typical, energy : ndarray of shape (m,), float64, finite, ``m >= 2``
        The ``typical`` and ``energy`` scores of the held-out inputs.

    Returns
    -------
    ndarray of shape (4,), float64; both standard deviations > 0 (floored at ``1e-9`` times the
    score's scale, so that constant scores standardise to 0 rather than to NaN).

    Raises
    ------
    ValueError
        Fewer than two inputs, arrays of other shapes, or non-finite scores.
    """
    t, e = np.asarray(typical, dtype=np.float64), np.asarray(energy, dtype=np.float64)
    if t.ndim != 1 or t.shape != e.shape or t.size < 2:
        raise ValueError(f"fit_reference needs two 1-d arrays of one length >= 2, got {t.shape} and "
                         f"{e.shape}")
    if not (np.isfinite(t).all() and np.isfinite(e).all()):
        raise ValueError("fit_reference needs finite scores")

    def moments(s):
        return s.mean(), max(s.std(), 1e-9 * max(np.abs(s).max(), 1.0))

    return np.array([*moments(t), *moments(e)])


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
