"""One LightningDataModule for every concept data set."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader
from torchvision.transforms import v2

from .common import check_split_sizes
from .folds import ClassFold, class_disjoint_folds, load_folds, open_world_split, save_folds
from .registry import get_spec, load_dataset
from .tables import ConceptDataset, SampleTable

__all__ = ["ConceptDataModule", "build_transform", "eval_crop", "normalisation", "IMAGENET_MEAN",
           "IMAGENET_STD"]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

PARTS = ("train", "val", "test", "novel")


def build_transform(
    image_size: int,
    *,
    train: bool,
    crop_scale: tuple[float, float] = (0.08, 1.0),
    crop_ratio: tuple[float, float] = (3 / 4, 4 / 3),
    hflip: bool = True,
    eval_crop_fraction: float = 0.875,
    mean: Sequence[float] = IMAGENET_MEAN,
    std: Sequence[float] = IMAGENET_STD,
) -> v2.Compose:
    """Image transform (torchvision v2) from a PIL image or HxWx3 uint8 array to a float tensor.

    Training: ``RandomResizedCrop`` + horizontal flip + normalisation. Evaluation: resize the
    short side to ``image_size / eval_crop_fraction``, centre crop, normalisation: `eval_crop`
    followed by `normalisation` (what a corrupted image goes through, the corruption between the
    two, as in ImageNet-C).
    """
    if train:
        steps: list[Any] = [v2.ToImage(), v2.RandomResizedCrop(image_size, scale=crop_scale, ratio=crop_ratio,
                                                              antialias=True)]
        if hflip:
            steps.append(v2.RandomHorizontalFlip())
        return v2.Compose(steps + normalisation(mean, std).transforms)
    crop = eval_crop(image_size, eval_crop_fraction)
    return v2.Compose(crop.transforms + normalisation(mean, std).transforms)


def eval_crop(image_size: int, eval_crop_fraction: float = 0.875) -> v2.Compose:
    """The evaluation geometry: a PIL image or HxWx3 uint8 array to a uint8 image tensor (3, S, S),
    ``S = image_size`` (short side resized to ``image_size / eval_crop_fraction``, centre crop)."""
    if not 0 < eval_crop_fraction <= 1:
        raise ValueError("eval_crop_fraction must be in (0, 1]")
    return v2.Compose([v2.ToImage(), v2.Resize(round(image_size / eval_crop_fraction), antialias=True),
                       v2.CenterCrop(image_size)])


def normalisation(mean: Sequence[float] = IMAGENET_MEAN, std: Sequence[float] = IMAGENET_STD) -> v2.Compose:
    """A uint8 image tensor (3, H, W) to the float32 tensor the detector reads (scaled to [0, 1],
    normalised with ``mean`` and ``std``)."""
    return v2.Compose([v2.ToDtype(torch.float32, scale=True), v2.Normalize(list(mean), list(std))])


def _to_tensor(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.asarray(x, dtype=np.float32))


class ConceptDataModule(L.LightningDataModule):
    """Batches ``(input, concepts float32 (k,), class int)`` for any concept data set.

    Parameters
    ----------
    dataset : str
        ``cub``, ``awa2``, ``awa_features`` or ``synthetic`` (the default, no download).
    data_root : str, optional
        Folder holding the data sets (else ``$FERL_DATA_ROOT``, see
        :func:`cbm.data.common.resolve_data_root`).
    dataset_kwargs : dict, optional
        Options of the loader, e.g. ``{"classes": 20}`` for CUB-20 or
        ``{"n_per_class": 60}`` for the synthetic world.
    image_size : int, optional
        Network input side; default per data set (224 for CUB/AwA2, 64 for synthetic).
    batch_size, num_workers, pin_memory
        DataLoader settings.
    crop_scale, crop_ratio, hflip, eval_crop_fraction : optional
        Transform settings; defaults per data set (see :mod:`cbm.data.registry`).
    augment : bool
        Use the training transform for the train split (else the evaluation one).
    fold : int, optional
        Open-world fold to use: its held-out classes are removed from train/val/test and their
        test images form the ``novel`` part.
    n_folds, fold_seed : int
        How the class-disjoint folds are drawn (:func:`~cbm.data.folds.class_disjoint_folds`).
    folds_path : str, optional
        Load the folds from this JSON file instead of drawing them.
    seed : int
        Seed of the data set's splits (unless ``dataset_kwargs`` sets one) and of the training
        shuffle.
    table : SampleTable, optional
        An already-loaded table (then ``dataset`` only picks the transform defaults).
    """

    def __init__(
        self,
        dataset: str = "synthetic",
        data_root: str | None = None,
        dataset_kwargs: dict[str, Any] | None = None,
        image_size: int | None = None,
        batch_size: int = 32,
        num_workers: int = 0,
        pin_memory: bool = False,
        crop_scale: tuple[float, float] | None = None,
        crop_ratio: tuple[float, float] | None = None,
        hflip: bool | None = None,
        eval_crop_fraction: float | None = None,
        augment: bool = True,
        fold: int | None = None,
        n_folds: int = 5,
        fold_seed: int = 0,
        folds_path: str | None = None,
        seed: int = 0,
        table: SampleTable | None = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["table"])
        self.spec = get_spec(dataset)
        self.dataset_name = dataset
        self.data_root = data_root
        self.dataset_kwargs = dict(dataset_kwargs or {})
        self.image_size = image_size or self.spec.image_size
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.crop_scale = tuple(crop_scale or self.spec.crop_scale)
        self.crop_ratio = tuple(crop_ratio or self.spec.crop_ratio)
        self.hflip = self.spec.hflip if hflip is None else hflip
        self.eval_crop_fraction = eval_crop_fraction or self.spec.eval_crop_fraction
        self.augment = augment
        self.fold = fold
        self.n_folds = n_folds
        self.fold_seed = fold_seed
        self.folds_path = folds_path
        self.seed = seed
        self._table = table
        self._folds: list[ClassFold] | None = None
        self.parts: dict[str, np.ndarray] = {}
        self.datasets: dict[str, ConceptDataset] = {}

    # -- loading ---------------------------------------------------------------------------
    @property
    def table(self) -> SampleTable:
        """The loaded data set (loaded on first access)."""
        if self._table is None:
            kwargs = dict(self.dataset_kwargs)
            kwargs.setdefault("seed", self.seed)
            self._table = load_dataset(self.dataset_name, data_root=self.data_root, **kwargs)
        return self._table

    @property
    def concept_names(self) -> list[str]:
        return self.table.concept_names

    @property
    def class_names(self) -> list[str]:
        return self.table.class_names

    @property
    def concept_groups(self) -> dict[str, list[int]] | None:
        return self.table.concept_groups

    @property
    def n_concepts(self) -> int:
        return self.table.n_concepts

    @property
    def n_classes(self) -> int:
        return self.table.n_classes

    @property
    def input_kind(self) -> str:
        """``"image"`` or ``"features"``."""
        return self.table.kind

    @property
    def n_features(self) -> int | None:
        """Input width for feature data sets, else None."""
        return getattr(self.table, "n_features", None)

    @property
    def fold_classes(self) -> int:
        """Number of classes the folds are drawn over (those not reserved as ``novel``)."""
        tab = self.table
        ids = np.unique(tab.y[tab.split != "novel"])
        if not np.array_equal(ids, np.arange(len(ids))):
            raise ValueError("folds need the non-novel classes to be 0..m-1")
        return len(ids)

    @property
    def folds(self) -> list[ClassFold]:
        """The class-disjoint folds (drawn or loaded on first access)."""
        if self._folds is None:
            if self.folds_path is not None:
                self._folds = load_folds(self.folds_path, class_names=self._fold_names())
            else:
                self._folds = class_disjoint_folds(self.fold_classes, self.n_folds, self.fold_seed)
        return self._folds

    def _fold_names(self) -> list[str]:
        return self.table.class_names[: self.fold_classes]

    def save_folds(self, path: str | os.PathLike) -> Path:
        """Save the folds (to keep with a run)."""
        return save_folds(
            path,
            self.folds,
            n_classes=self.fold_classes,
            seed=None if self.folds_path else self.fold_seed,
            class_names=self._fold_names(),
            dataset=self.dataset_name,
        )

    # -- transforms ------------------------------------------------------------------------
    def transform(self, train: bool) -> Callable[[Any], Any]:
        """The input transform for training (``train=True``) or evaluation."""
        if self.table.kind == "features":
            return _to_tensor
        assert self.image_size is not None
        return build_transform(
            self.image_size,
            train=train and self.augment,
            crop_scale=self.crop_scale,  # type: ignore[arg-type]
            crop_ratio=self.crop_ratio,  # type: ignore[arg-type]
            hflip=self.hflip,
            eval_crop_fraction=self.eval_crop_fraction,
        )

    # -- Lightning hooks -------------------------------------------------------------------
    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        tab = self.table
        if self.fold is not None:
            if not 0 <= self.fold < len(self.folds):
                raise ValueError(f"fold {self.fold} out of range 0..{len(self.folds) - 1}")
            self.parts = open_world_split(tab.y, tab.split, self.folds[self.fold])
        else:
            self.parts = {p: tab.indices(p) for p in PARTS}
        for p in PARTS:
            self.datasets[p] = tab.dataset(indices=self.parts[p], transform=self.transform(p == "train"))

    def _loader(self, ds: ConceptDataset, shuffle: bool, drop_last: bool = False) -> DataLoader:
        gen = torch.Generator().manual_seed(self.seed) if shuffle else None
        return DataLoader(
            ds,
            batch_size=self.batch_size,
            shuffle=shuffle,
            drop_last=drop_last,
            num_workers=self.num_workers,
            pin_memory=self.pin_memory,
            persistent_workers=self.num_workers > 0,
            generator=gen,
        )

    def train_dataloader(self) -> DataLoader:
        """Shuffled training batches with the training transform.

        A last batch of one sample is dropped (BatchNorm cannot normalise one value per channel in
        training mode); the order is reshuffled each epoch, so a different sample sits out each time.

        Raises
        ------
        ValueError
            The training split has fewer than two samples.
        """
        self.setup()
        ds = self.datasets["train"]
        check_split_sizes({"train": len(ds)}, ("train",))
        return self._loader(ds, shuffle=True, drop_last=len(ds) % self.batch_size == 1)

    def val_dataloader(self) -> DataLoader:
        self.setup()
        return self._loader(self.datasets["val"], shuffle=False)

    def test_dataloader(self) -> DataLoader:
        self.setup()
        return self._loader(self.datasets["test"], shuffle=False)

    def novel_dataloader(self) -> DataLoader:
        """Images of the held-out classes (fold held-out classes or the data set's novel ones)."""
        self.setup()
        return self._loader(self.datasets["novel"], shuffle=False)

    def eval_dataloader(self, part: str) -> DataLoader:
        """Any part (``train``, ``val``, ``test``, ``novel``) with the evaluation transform and
        in table order, e.g. to export concept predictions; ``.dataset.sample_ids`` gives ids."""
        self.setup()
        if part not in PARTS:
            raise ValueError(f"unknown part {part!r}; one of {PARTS}")
        ds = self.table.dataset(indices=self.parts[part], transform=self.transform(False))
        return self._loader(ds, shuffle=False)

    def describe(self) -> dict[str, Any]:
        """JSON-able summary of the data (sizes per part, names, provenance) for a run."""
        self.setup()
        out = self.table.summary()
        out["parts"] = {p: int(len(ix)) for p, ix in self.parts.items()}
        out["fold"] = self.fold
        if self.fold is not None:
            out["fold_held_out"] = list(self.folds[self.fold].held_out)
        return out
