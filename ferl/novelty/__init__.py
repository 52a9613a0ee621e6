"""Novelty of an input for a fitted tree: the leaf Gaussians (typicality), the rule prototypes, the
paper's node Gaussians and routing loss, the OOD scores and their kinds (`ferl.novelty.kinds`: the
product's, the ablations' and `default_kind`), the anomalous-attribute ranking and the novelty
discount of the evidence."""

from ferl.novelty.kinds import OOD_KINDS, default_kind
from ferl.novelty.scores import AnomalousFeature, Novelty

__all__ = ["OOD_KINDS", "AnomalousFeature", "Novelty", "default_kind"]
