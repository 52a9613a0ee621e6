"""Input check shared by the metric modules (`ferl.metrics.classification`, `ferl.metrics.ood`)."""

from __future__ import annotations

import numpy as np

__all__ = ["finite_1d"]


def finite_1d(values: np.ndarray, name: str) -> np.ndarray:
    """``values`` as a non-empty finite 1-D float array; ValueError naming ``name`` otherwise."""
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or inf")
    return arr
