"""Test-time concept interventions: an expert answers concept groups and the head is re-run.

Owns the run-level API (`load_concepts`, `open_head`, `RunHead`: a head with its calibration,
concept groups and expert values), the intervention curves (`intervention_curve`: accuracy,
credal coverage, set size, abstention and OOD score against the number of answered groups), their
tables and figure (`cbm.interventions.report`) and the ``evaluate-interventions`` console script
(`cbm.interventions.cli`). The concept side lives in `cbm.concepts.interventions`, the head side
and the policies in `cbm.heads.interventions` and `cbm.heads.policies`.
"""

from cbm.interventions.curves import Curve, intervention_curve, k_grid
from cbm.interventions.protocol import InterventionSettings, evaluate_interventions, evaluate_run
from cbm.interventions.run import FITS, RunConcepts, RunHead, load_concepts, open_head

__all__ = [
    "FITS",
    "Curve",
    "InterventionSettings",
    "RunConcepts",
    "RunHead",
    "evaluate_interventions",
    "evaluate_run",
    "intervention_curve",
    "k_grid",
    "load_concepts",
    "open_head",
]
