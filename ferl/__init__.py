"""FERL: Fast Evidential Rule Learning (torch-free).

A fuzzy rule tree whose nodes are Dempster-Shafer masses: a class, a credal prediction set, an
abstention, an ignorance mass and novelty scores from one deterministic pass.
"""

from ferl.estimator import PRESETS, FERLClassifier
from ferl.evidence.algebra import Evidence

__all__ = ["FERLClassifier", "Evidence", "PRESETS"]
__version__ = "0.1.0"
