"""Fixed fuzzy partitions of the compact variant: low / medium / high per feature."""

from __future__ import annotations

import numpy as np

__all__ = ["SET_NAMES", "fixed_partitions"]

SET_NAMES = ("low", "medium", "high")
_QUANTILES = (0.2, 0.4, 0.6, 0.8)


def fixed_partitions(X: np.ndarray, sample_weight: np.ndarray | None = None) -> np.ndarray:
    """Three quantile-based trapezoidal fuzzy sets per feature.

    With the training quantiles ``q20 <= q40 <= q60 <= q80`` of each feature: low is
    ``(-inf, -inf, q20, q40)``, medium ``(q20, q40, q60, q80)`` and high ``(q60, q80, +inf, +inf)``.
    On every feature the three memberships sum to one (a Ruspini partition) unless quantiles tie,
    in which case a ramp degenerates into a step. A compact-variant split is the complementary pair
    "f is S" / "f is not S" for one of these sets (paper section 3.1, appendix C.4).

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features), float64, finite
    sample_weight : ndarray of shape (n_samples,), optional
        Samples with zero weight are left out of the quantiles.

    Returns
    -------
    ndarray of shape (n_features, 3, 4), float64
        Trapezoids ``(a, b, c, d)`` for low, medium, high.
    """
    if sample_weight is not None:
        X = X[sample_weight > 0]
    q = np.quantile(X, _QUANTILES, axis=0)  # (4, d)
    d = X.shape[1]
    sets = np.empty((d, 3, 4))
    inf = np.inf
    sets[:, 0] = np.stack([np.full(d, -inf), np.full(d, -inf), q[0], q[1]], axis=1)
    sets[:, 1] = np.stack([q[0], q[1], q[2], q[3]], axis=1)
    sets[:, 2] = np.stack([q[2], q[3], np.full(d, inf), np.full(d, inf)], axis=1)
    return sets
