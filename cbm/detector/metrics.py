"""The concept detector's metrics: mean per-concept accuracy, Koh et al.'s concept error, mean AUROC."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torchmetrics import MetricCollection
from torchmetrics.classification import (
    MultilabelAccuracy,
    MultilabelAUROC,
    MultilabelHammingDistance,
)
from torchmetrics.utilities import dim_zero_cat

__all__ = ["MeanConceptAUROC", "concept_metrics", "stage_metrics"]


class MeanConceptAUROC(MultilabelAUROC):
    """Mean per-concept AUROC over the concepts whose targets hold both values.

    torchmetrics' macro AUROC counts a concept without positives as 0; a concept constant in an
    evaluation split (common with class-level labels) has no AUROC and is left out here.
    Returns NaN when no concept has both values.
    """

    def __init__(self, num_labels: int, **kwargs: Any) -> None:
        super().__init__(num_labels=num_labels, average=None, thresholds=None, **kwargs)

    def compute(self) -> Tensor:
        target = dim_zero_cat(self.target)
        n_pos = (target == 1).sum(0)
        valid = (n_pos > 0) & (n_pos < target.shape[0])
        if not bool(valid.any()):
            return torch.tensor(float("nan"), device=target.device)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*(positive|negative) samples.*")
            per_concept = super().compute()
        return per_concept[valid].mean()


def stage_metrics(k: int, prefix: str) -> MetricCollection:
    """Concept accuracy, concept error and mean concept AUROC of k concepts, names prefixed."""
    return MetricCollection(
        {
            "concept_acc": MultilabelAccuracy(num_labels=k, average="macro"),
            "concept_error": MultilabelHammingDistance(num_labels=k, average="macro"),
            "auroc": MeanConceptAUROC(num_labels=k),
        },
        prefix=prefix,
    )


def concept_metrics(probs: np.ndarray, concept_labels: np.ndarray) -> dict[str, float]:
    """The detector's evaluation metrics on whole arrays (e.g. an exported concept table).

    Parameters
    ----------
    probs : ndarray of shape (n, k), float in [0, 1]
    concept_labels : ndarray of shape (n, k), 0/1

    Returns
    -------
    metrics : dict
        ``concept_acc`` (mean per-concept accuracy at 0.5), ``concept_error`` (1 - that, Koh et
        al.'s concept error) and ``auroc`` (mean per-concept AUROC over concepts with both
        values; NaN when none has).
    """
    k = int(np.shape(probs)[1])
    metrics = stage_metrics(k, "")
    out = metrics(torch.as_tensor(np.asarray(probs, dtype=np.float32)),
                  torch.as_tensor(np.asarray(concept_labels, dtype=np.int64)))
    return {name: float(value) for name, value in out.items()}
