"""Datasets by name, with their default image settings."""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .awa2 import load_awa2
from .common import close_matches
from .cub import load_cub
from .custom import load_custom
from .features import load_awa_features
from .synthetic import make_synthetic
from .tables import SampleTable

__all__ = ["DatasetSpec", "DATASETS", "get_spec", "load_dataset"]


@dataclass(frozen=True)
class DatasetSpec:
    """How to load a data set and its default transforms.

    Attributes
    ----------
    loader : callable
        Returns a :class:`~cbm.data.common.SampleTable`.
    image_size : int or None
        Default network input side (None for feature data sets).
    crop_scale, crop_ratio : tuple of float
        ``RandomResizedCrop`` ranges for training.
    eval_crop_fraction : float
        Evaluation resizes the short side to ``image_size / eval_crop_fraction`` and crops the
        centre (``1.0``: no crop, for images whose layout carries concepts).
    hflip : bool
        Whether horizontal flips keep the concepts (no left/right concepts).
    """

    loader: Callable[..., SampleTable]
    image_size: int | None
    crop_scale: tuple[float, float] = (0.08, 1.0)
    crop_ratio: tuple[float, float] = (3 / 4, 4 / 3)
    eval_crop_fraction: float = 0.875
    hflip: bool = True


DATASETS: dict[str, DatasetSpec] = {
    "cub": DatasetSpec(load_cub, image_size=224),
    "awa2": DatasetSpec(load_awa2, image_size=224),
    "awa_features": DatasetSpec(load_awa_features, image_size=None),
    "custom": DatasetSpec(load_custom, image_size=224),
    # position/size/count are concepts: mild crops only, no centre crop at evaluation
    "synthetic": DatasetSpec(
        make_synthetic,
        image_size=64,
        crop_scale=(0.85, 1.0),
        crop_ratio=(0.9, 1.1),
        eval_crop_fraction=1.0,
    ),
}


def get_spec(name: str) -> DatasetSpec:
    """The :class:`DatasetSpec` of ``name``; an unknown name lists close matches."""
    try:
        return DATASETS[name]
    except KeyError:
        raise ValueError(f"unknown dataset {name!r}." + close_matches(name, DATASETS)) from None


def load_dataset(name: str, *, data_root: str | os.PathLike | None = None, **kwargs: Any) -> SampleTable:
    """Load a data set by name (``cub``, ``awa2``, ``awa_features``, ``synthetic``, ``custom``).

    ``data_root`` is passed to loaders that read files; other keyword arguments go to the
    loader (:func:`~cbm.data.cub.load_cub`, :func:`~cbm.data.awa2.load_awa2`,
    :func:`~cbm.data.features.load_awa_features`, :func:`~cbm.data.synthetic.make_synthetic`,
    :func:`~cbm.data.custom.load_custom`).
    """
    loader = get_spec(name).loader
    params = inspect.signature(loader).parameters
    unknown = sorted(set(kwargs) - set(params))
    if unknown:
        raise TypeError(f"{name}: unknown option(s) {unknown}; the loader takes {sorted(params)}")
    if "data_root" in params:
        kwargs["data_root"] = data_root
    return loader(**kwargs)
