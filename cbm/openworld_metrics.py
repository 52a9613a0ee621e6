"""Scoring pieces of the open-world protocol (paper §5.2, Table 5): the OOD metrics of one score
at a retained-class acceptance threshold, and attribute naming (precision@k against the concepts in
which a held-out class differs from its nearest retained class).

OOD is the positive class and scores grow with novelty (the conventions of :mod:`ferl.metrics`,
which computes every number here).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["anomaly_ground_truth", "precision_at_k"]


def anomaly_ground_truth(
    class_concepts: np.ndarray, held_out: Sequence[int], retained: Sequence[int]
) -> dict[int, tuple[list[int], np.ndarray]]:
    """Concepts in which each held-out class differs from its nearest retained class.

    The nearest retained classes are those at the smallest Hamming distance between binary class
    profiles; with ties, a concept counts when it differs from any of them.

    Parameters
    ----------
    class_concepts : ndarray of shape (n_classes, n_concepts), {0, 1}
        Class-level concept profiles (``SampleTable.class_concepts``).
    held_out, retained : sequence of int
        Class indices (disjoint, non-empty).

    Returns
    -------
    dict
        ``held-out class -> (nearest retained classes, bool mask of shape (n_concepts,))``.

    Raises
    ------
    ValueError
        Empty or overlapping class sets, indices out of range, non-binary profiles.
    """
    cc = np.asarray(class_concepts)
    if cc.ndim != 2 or not np.isin(cc, (0, 1)).all():
        raise ValueError(f"class_concepts must be a binary (n_classes, n_concepts) matrix, got {cc.shape}")
    held, kept = np.asarray(held_out, dtype=np.int64), np.asarray(retained, dtype=np.int64)
    if not held.size or not kept.size or np.intersect1d(held, kept).size:
        raise ValueError("held_out and retained must be non-empty and disjoint")
    if min(held.min(), kept.min()) < 0 or max(held.max(), kept.max()) >= len(cc):
        raise ValueError(f"class indices must lie in 0..{len(cc) - 1}")
    out = {}
    for h in held.tolist():
        diff = cc[kept] != cc[h]
        dist = diff.sum(axis=1)
        near = dist == dist.min()
        out[h] = (kept[near].tolist(), diff[near].any(axis=0))
    return out


def precision_at_k(ranked: np.ndarray, truth: np.ndarray, k: int) -> np.ndarray:
    """Fraction of each sample's top-``k`` named concepts that are truly anomalous.

    Parameters
    ----------
    ranked : ndarray of shape (n, K), int
        Concept indices, most anomalous first (K >= k).
    truth : ndarray of shape (n, n_concepts), bool
        Ground-truth anomalous concepts of each sample.
    k : int

    Returns
    -------
    ndarray of shape (n,), float in [0, 1]

    Raises
    ------
    ValueError
        Mismatched shapes or k outside 1..K.
    """
    ranked, truth = np.asarray(ranked), np.asarray(truth, dtype=bool)
    if ranked.ndim != 2 or truth.ndim != 2 or len(ranked) != len(truth):
        raise ValueError(f"ranked (n, K) and truth (n, n_concepts) must share n, got {ranked.shape}, "
                         f"{truth.shape}")
    if not 1 <= k <= ranked.shape[1]:
        raise ValueError(f"k must be in 1..{ranked.shape[1]}, got {k}")
    return np.take_along_axis(truth, ranked[:, :k], axis=1).mean(axis=1)


