"""Concept probabilities after the detector: per-concept isotonic calibration.

Owns `ConceptCalibrator` (one isotonic map per concept, fitted on the validation split, saved as
``calibration.json``) and `concept_ece`, and `check_concept_values`, the one check of an (n, k)
matrix of concept values in [0, 1] that calibration, interventions and the heads share, with that
domain (`CONCEPT_DOMAIN`).
"""

from cbm.concepts.calibration import ConceptCalibrator, concept_ece
from cbm.concepts.values import CONCEPT_DOMAIN, check_concept_values

__all__ = ["CONCEPT_DOMAIN", "ConceptCalibrator", "check_concept_values", "concept_ece"]
