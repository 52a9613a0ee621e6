"""Covariate shift: a run's test images under ImageNet-C corruptions, through its detector, calibration
and heads (``evaluate-shift``).

Owns the settings (`ShiftSettings`), the cache of corrupted detector outputs keyed by run and
corruption (`cbm.shift.images`), the methods compared (the product's operating point, every FERL
preset, a logistic regression with split-conformal, APS and RAPS sets, and the shift detectors:
`cbm.shift.methods`), the protocol (`evaluate_shift`) and its tables and figures (`cbm.shift.report`).
"""

from cbm.shift.protocol import evaluate_shift
from cbm.shift.settings import ShiftSettings

__all__ = ["ShiftSettings", "evaluate_shift"]
