"""Scoring pieces of the open-world protocol (paper §5.2, Table 5): the OOD metrics of one score
at a retained-class acceptance threshold, and attribute naming (precision@k against the concepts in
which a held-out class differs from its nearest retained class).

OOD is the positive class and scores grow with novelty (the conventions of :mod:`ferl.metrics`,
which computes every number here).

Two ground truths: :func:`anomaly_ground_truth` compares class profiles (the only
ground truth class-level concept labels such as AwA2's allow), :func:`image_anomaly_ground_truth`
compares each image's own concept labels with the retained class profiles (it differs where images
deviate from their class profile, as in the synthetic world with ``p_swap > 0``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["anomaly_ground_truth", "detection_at_rate", "image_anomaly_ground_truth", "precision_at_k"]


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


def image_anomaly_ground_truth(concepts: np.ndarray, class_concepts: np.ndarray,
                               retained: Sequence[int]) -> np.ndarray:
    """Concepts in which each image differs from its nearest retained class profile.

    The nearest retained classes of an image are those whose binary profile is at the smallest
    Hamming distance from the image's own concept labels; with ties, a concept counts when it
    differs from any of them.

    Parameters
    ----------
    concepts : ndarray of shape (n, n_concepts), {0, 1}
        Per-image concept labels of the held-out images.
    class_concepts : ndarray of shape (n_classes, n_concepts), {0, 1}
    retained : sequence of int
        Retained class indices (non-empty).

    Returns
    -------
    ndarray of shape (n, n_concepts), bool

    Raises
    ------
    ValueError
        Non-binary inputs, mismatched concept counts, empty or out-of-range ``retained``.
    """
    x, cc = np.asarray(concepts), np.asarray(class_concepts)
    if x.ndim != 2 or cc.ndim != 2 or x.shape[1] != cc.shape[1]:
        raise ValueError(f"concepts (n, c) and class_concepts (n_classes, c) must share c, got {x.shape}, "
                         f"{cc.shape}")
    if not (np.isin(x, (0, 1)).all() and np.isin(cc, (0, 1)).all()):
        raise ValueError("concepts and class_concepts must be binary")
    kept = np.asarray(retained, dtype=np.int64)
    if not kept.size or kept.min() < 0 or kept.max() >= len(cc):
        raise ValueError(f"retained must be non-empty class indices in 0..{len(cc) - 1}")
    diff = x.astype(bool)[:, None, :] != cc[kept].astype(bool)[None, :, :]
    dist = diff.sum(axis=2)
    near = dist == dist.min(axis=1, keepdims=True)
    return (diff & near[:, :, None]).any(axis=1)


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




def detection_at_rate(scores: dict[str, dict[str, np.ndarray]], names: Sequence[str],
                      rate: float) -> dict[str, float]:
    """Each baseline's share of held-out test inputs flagged when it flags ``rate`` of the retained
    ones: how the product's operating point is compared (the novelty discount's abstention on
    held-out inputs against a baseline thresholded to flag as many retained inputs), so that each
    score is judged at the false-alarm rate a user meets.

    Parameters
    ----------
    scores : dict
        Score name -> ``{"test": (n,), "novel": (m,)}`` float arrays (higher = more novel).
    names : sequence of str
        The baselines to compare (keys of ``scores``).
    rate : float in [0, 1]
        The share of retained test inputs flagged (the discount's retained abstention).

    Returns
    -------
    dict of str to float in [0, 1]
        Per baseline, the share of held-out inputs above the ``1 - rate`` quantile of its retained
        test scores (0 when ``rate`` is 0).
    """
    def flagged(s):
        return float(np.mean(s["novel"] > np.quantile(s["test"], 1.0 - rate))) if rate > 0 else 0.0

    return {b: flagged(scores[b]) for b in names}
