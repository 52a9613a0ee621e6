"""Novelty of an input for a fitted tree: the leaf Gaussians (typicality), the rule prototypes, the
paper's node Gaussians and routing loss, the OOD scores, the anomalous-attribute ranking and the
novelty discount of the evidence."""

from ferl.novelty.scores import OOD_KINDS, AnomalousFeature, Novelty

__all__ = ["OOD_KINDS", "AnomalousFeature", "Novelty"]
