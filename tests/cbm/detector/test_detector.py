"""ConceptDetector: backbones by name, pretrained weights, loss weighting, metrics, features mode."""

from __future__ import annotations

import numpy as np
import pytest
import timm
import torch
from lightning.pytorch import Trainer, seed_everything
from safetensors.torch import save_file
from torch.utils.data import DataLoader, TensorDataset

from cbm.detector import (
    ConceptDetector,
    MeanConceptAUROC,
    concept_metrics,
    imbalance_pos_weight,
)
from cbm.detector.backbones import PretrainedWeightsError

TINY = "test_resnet"  # timm's 0.4 M-parameter ResNet for tests
NAMES = ["a", "b", "c"]


def _trainer(**kwargs) -> Trainer:
    defaults = dict(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False)
    return Trainer(**{**defaults, **kwargs})


def test_image_forward_gives_one_logit_per_concept_and_probabilities():
    torch.manual_seed(0)
    det = ConceptDetector(NAMES, backbone=TINY)
    x = torch.randn(4, 3, 32, 32)
    assert det(x).shape == (4, 3)
    p = det.predict_step((x, torch.zeros(4, 3), torch.zeros(4)), 0)
    assert p.dtype == torch.float32 and bool(((p > 0) & (p < 1)).all())
    assert det.concept_names == NAMES and det.hparams.backbone == TINY


def test_unknown_backbone_lists_close_timm_names():
    with pytest.raises(ValueError, match=r"unknown timm backbone 'resnet5O'.*resnet50"):
        ConceptDetector(NAMES, backbone="resnet5O")


def test_missing_pretrained_file_says_how_to_fix(tmp_path):
    missing = tmp_path / "resnet.safetensors"
    with pytest.raises(FileNotFoundError, match=r"resnet\.safetensors.*pretrained: false"):
        ConceptDetector(NAMES, backbone=TINY, pretrained=str(missing))


def test_pretrained_true_without_cache_fails_at_start(tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setattr(torch.hub, "_hub_dir", str(tmp_path / "torch"))
    with pytest.raises(PretrainedWeightsError, match=r"not in timm's cache.*timm/test_resnet"):
        ConceptDetector(NAMES, backbone=TINY, pretrained=True)


def _reference_weights() -> dict[str, torch.Tensor]:
    torch.manual_seed(1)
    return timm.create_model(TINY, num_classes=1000).state_dict()


@pytest.mark.parametrize("source", ["file", "cache"])
def test_pretrained_weights_load_from_file_or_timm_cache(tmp_path, monkeypatch, source):
    ref = _reference_weights()
    if source == "file":
        path = tmp_path / "weights.pth"
        torch.save(ref, path)
        pretrained: bool | str = str(path)
    else:  # a Hugging Face cache as timm fills it
        repo = tmp_path / "hf" / "models--timm--test_resnet.r160_in1k"
        (repo / "refs").mkdir(parents=True)
        (repo / "refs" / "main").write_text("abc123")
        (repo / "snapshots" / "abc123").mkdir(parents=True)
        save_file({k: v.contiguous() for k, v in ref.items()},
                  repo / "snapshots" / "abc123" / "model.safetensors")
        import huggingface_hub.constants

        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
        pretrained = True
    torch.manual_seed(2)  # a different random init, so equality proves loading
    det = ConceptDetector(NAMES, backbone=TINY, pretrained=pretrained)
    got = det.backbone.state_dict()
    assert "fc.weight" not in got  # the ImageNet classifier is dropped
    for key, value in got.items():
        torch.testing.assert_close(value, ref[key], rtol=0, atol=0)


def test_imbalance_pos_weight_is_negatives_over_positives():
    labels = np.array([[1, 0, 1], [0, 0, 1], [0, 1, 1], [0, 1, 1]], dtype=np.uint8)
    np.testing.assert_allclose(imbalance_pos_weight(labels), [3.0, 1.0, 1.0])  # last: constant
    with pytest.raises(ValueError, match="only 0 and 1"):
        imbalance_pos_weight(np.array([[0, 2]]))


def test_pos_weight_enters_the_loss():
    torch.manual_seed(0)
    x, c = torch.randn(6, 3, 32, 32), torch.tensor([[1.0, 0, 1]] * 6)
    loader = DataLoader(TensorDataset(x, c, torch.zeros(6, dtype=torch.long)), batch_size=6)
    det = ConceptDetector(NAMES, backbone=TINY, pos_weight=[4.0, 1.0, 2.0])
    got = _trainer().validate(det, loader, verbose=False)[0]["val/loss"]
    with torch.no_grad():
        expected = torch.nn.functional.binary_cross_entropy_with_logits(
            det.eval()(x), c, pos_weight=torch.tensor([4.0, 1.0, 2.0]))
        unweighted = torch.nn.functional.binary_cross_entropy_with_logits(det(x), c)
    assert got == pytest.approx(expected.item(), rel=1e-5)
    assert abs(got - unweighted.item()) > 1e-3
    with pytest.raises(ValueError, match="3 finite positive numbers"):
        ConceptDetector(NAMES, backbone=TINY, pos_weight=[1.0, 0.0, 1.0])


def test_mean_auroc_leaves_out_constant_concepts():
    probs = torch.tensor([[0.9, 0.2], [0.1, 0.7], [0.8, 0.4], [0.3, 0.6]])
    target = torch.tensor([[1, 0], [0, 0], [1, 0], [0, 0]])  # concept 2 never present
    metric = MeanConceptAUROC(num_labels=2)
    metric.update(probs, target)
    assert metric.compute().item() == pytest.approx(1.0)  # torchmetrics' macro gives 0.5
    m = concept_metrics(probs.numpy(), target.numpy())
    assert m["concept_acc"] == pytest.approx((4 / 4 + 2 / 4) / 2)
    assert m["concept_error"] == pytest.approx(1 - m["concept_acc"])


def _feature_loaders(n: int = 256, d: int = 12, k: int = 3, nan: bool = False, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g) * 3 + 5  # off-centre, scaled: the input BatchNorm copes
    c = (x[:, :k] > 5).float()  # concept j present when feature j is above its mean
    if nan:
        x[7, 0] = float("nan")
    ds = TensorDataset(x, c, torch.zeros(n, dtype=torch.long))
    return DataLoader(ds, batch_size=32, shuffle=True, generator=g), DataLoader(ds, batch_size=64)


def test_features_mode_learns_random_vectors():
    seed_everything(0, verbose=False)
    train, val = _feature_loaders()
    det = ConceptDetector(NAMES, input_kind="features", feature_dim=12, hidden_dims=[32], lr=3e-2)
    _trainer(max_epochs=4).fit(det, train, val)
    probs = torch.cat(_trainer().predict(det, val))
    labels = torch.cat([b[1] for b in val])
    acc = ((probs > 0.5).float() == labels).float().mean().item()
    assert acc > 0.9
    assert _trainer().validate(det, val, verbose=False)[0]["val/auroc"] > 0.95


def test_features_mode_needs_feature_dim_and_no_pretrained():
    with pytest.raises(ValueError, match="feature_dim"):
        ConceptDetector(NAMES, input_kind="features")
    with pytest.raises(ValueError, match="image backbones"):
        ConceptDetector(NAMES, input_kind="features", feature_dim=4, pretrained=True)


def test_nan_loss_stops_training_with_a_message():
    train, _ = _feature_loaders(nan=True)
    _, val = _feature_loaders()
    det = ConceptDetector(NAMES, input_kind="features", feature_dim=12)
    with pytest.raises(FloatingPointError, match=r"non-finite train concept loss.*epoch 0"):
        _trainer(max_epochs=1).fit(det, train, val)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_bf16_channels_last_step():
    x, c = torch.randn(16, 3, 64, 64), (torch.rand(16, 3) > 0.5).float()
    loader = DataLoader(TensorDataset(x, c, torch.zeros(16, dtype=torch.long)), batch_size=8)
    det = ConceptDetector(NAMES, backbone=TINY)
    trainer = _trainer(accelerator="gpu", precision="bf16-mixed", max_epochs=1)
    trainer.fit(det, loader, loader)
    conv = next(m for m in det.backbone.modules() if isinstance(m, torch.nn.Conv2d))
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)
    assert trainer.callback_metrics["val/loss"].isfinite()


@pytest.mark.parametrize("damage", ["truncated", "empty", "text"])
def test_a_damaged_checkpoint_is_one_clear_error(tmp_path, damage):
    # a truncated best.ckpt gave predict a RuntimeError traceback (PytorchStreamReader ...)
    train, val = _feature_loaders()
    trainer = _trainer(max_epochs=1)
    trainer.fit(ConceptDetector(NAMES, input_kind="features", feature_dim=12), train, val)
    path = tmp_path / "best.ckpt"
    trainer.save_checkpoint(path)
    assert ConceptDetector.from_checkpoint(path).concept_names == NAMES
    data = path.read_bytes()
    path.write_bytes({"truncated": data[: len(data) // 2], "empty": b"", "text": b"not a checkpoint"}[damage])
    with pytest.raises(ValueError, match=rf"detector checkpoint {path} cannot be read: it is truncated or "
                                         r"damaged \(.+\); train the detector again"):
        ConceptDetector.from_checkpoint(path)
