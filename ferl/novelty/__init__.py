"""Novelty of an input for a fitted tree, one module per model: the paper's node Gaussians and their
path residual (`free_gaussians`), the leaf Gaussians (`leaf_gaussians`; compiled fit `leaf_fit`,
the pooled covariance and the leaf moments its pass keeps `leaf_moments`, cross-fitting
`cross_fit`), the rule prototypes (`prototypes`), the OOD scores and their kinds (`ood_score`: the
product's, the ablations' and `default_kind`), the novelty discount of the evidence (`discount`)
and the linear algebra they share (`linalg`).

`ferl.novelty.scores` fits them in one pass over the grown tree (`fit_novelty`: the reference rows
read as new inputs are, then node Gaussians, leaf Gaussians, prototypes, reference scores and
discount, in that order) and reads them out with every signal split over the features (`analyse`,
`Novelty`, the anomalous-attribute ranking)."""

from ferl.novelty.ood_score import OOD_KINDS, default_kind
from ferl.novelty.scores import AnomalousFeature, Novelty

__all__ = ["OOD_KINDS", "AnomalousFeature", "Novelty", "default_kind"]
