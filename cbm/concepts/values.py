"""The check of an (n, k) matrix of concept values in [0, 1] shared by calibration, interventions, heads."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["CONCEPT_DOMAIN", "check_concept_values"]

#: The bounds of every concept value (a probability or a label): what a perturbation of a concept
#: vector cannot leave, the domain of the heads' certified radius (`ferl._inputs.feature_domain`).
CONCEPT_DOMAIN = (0.0, 1.0)


def check_concept_values(X, names: Sequence[str], what: str, *, allow_empty: bool = False) -> np.ndarray:
    """Validate a matrix of concept values (probabilities or labels); return it as float64.

    Parameters
    ----------
    X : array-like of shape (n, k), real or bool
        One column per concept, every value finite in [0, 1].
    names : sequence of str of length k
        Concept names, used to name the first bad value.
    what : str
        What ``X`` is, to start the error messages (e.g. ``"probs to calibrate"``).
    allow_empty : bool, default=False
        Accept ``n = 0``.

    Returns
    -------
    ndarray of shape (n, k), float64

    Raises
    ------
    ValueError
        Wrong shape, no rows (unless ``allow_empty``), a dtype that is not real numbers or bool, or
        a value that is NaN, inf or outside [0, 1] (the message names its row and concept).
    """
    arr = np.asarray(X)
    if arr.ndim != 2 or arr.shape[1] != len(names):
        raise ValueError(f"{what} must have shape (n, {len(names)}) (a column per concept), got {arr.shape}")
    if arr.shape[0] == 0 and not allow_empty:
        raise ValueError(f"{what} has no rows")
    real = np.issubdtype(arr.dtype, np.number) and not np.issubdtype(arr.dtype, np.complexfloating)
    if not (real or arr.dtype == bool):
        raise ValueError(f"{what} must be real numbers, got dtype {arr.dtype}")
    arr = arr.astype(np.float64)
    bad = ~np.isfinite(arr) | (arr < 0) | (arr > 1)
    if bad.any():
        r, c = (int(v) for v in np.argwhere(bad)[0])
        raise ValueError(f"{what}: row {r}, concept {names[c]!r} is {arr[r, c]} (must be finite in [0, 1])")
    return arr
