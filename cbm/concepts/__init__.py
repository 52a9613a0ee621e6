"""Concept probabilities after the detector: per-concept isotonic calibration.

Owns `ConceptCalibrator` (one isotonic map per concept, fitted on the validation split, saved as
``calibration.json``) and `concept_ece`.
"""

from cbm.concepts.calibration import ConceptCalibrator, concept_ece

__all__ = ["ConceptCalibrator", "concept_ece"]
