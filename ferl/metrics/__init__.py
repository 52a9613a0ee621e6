"""Evaluation metrics shared by every FERL evaluation (torch-free): point predictions (accuracy,
AURC, ECE), set-valued predictions (coverage, determinacy, set size, u65/u80) in
`ferl.metrics.classification`, and OOD detection (AUROC, AUPR-Out, FPR95, rejection at a threshold)
in `ferl.metrics.ood`; all re-exported here (``from ferl import metrics as M``)."""

from ferl.metrics.classification import (
    accuracy,
    aurc,
    coverage,
    determinacy,
    expected_calibration_error,
    mean_set_size,
    risk_coverage_curve,
    u65,
    u80,
    utility_discounted_accuracy,
)
from ferl.metrics.ood import (
    aupr_out,
    fit_acceptance_threshold,
    fpr_at_95_tpr,
    ood_auroc,
    ood_summary,
    rejection_rate,
)

__all__ = [
    "accuracy", "aupr_out", "aurc", "coverage", "determinacy", "expected_calibration_error",
    "fit_acceptance_threshold", "fpr_at_95_tpr", "mean_set_size", "ood_auroc", "ood_summary",
    "rejection_rate", "risk_coverage_curve", "u65", "u80", "utility_discounted_accuracy",
]
