"""Open-world evaluation: classes held out of the detector and the heads, detected as novel.

Owns the class-disjoint protocol (`run_openworld`, one fold in `cbm.openworld.fold`), the
attribute-naming metrics (`cbm.openworld.metrics`), the Table-5 report with ROC curves
(`cbm.openworld.report`) and the ``evaluate-openworld`` console script.
"""

from cbm.openworld.fold import evaluate_fold, run_fold
from cbm.openworld.metrics import anomaly_ground_truth, image_anomaly_ground_truth, precision_at_k
from cbm.openworld.protocol import evaluate_openworld_main, run_openworld
from cbm.openworld.settings import EvalSettings

__all__ = [
    "EvalSettings",
    "anomaly_ground_truth",
    "evaluate_fold",
    "evaluate_openworld_main",
    "image_anomaly_ground_truth",
    "precision_at_k",
    "run_fold",
    "run_openworld",
]
