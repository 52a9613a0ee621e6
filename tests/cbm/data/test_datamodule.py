"""ConceptDataModule over every data set (fake trees and the synthetic world)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from cbm.data import ConceptDataModule, load_dataset, make_synthetic
from cbm.data.datamodule import build_transform


@pytest.fixture(scope="module")
def synthetic_table():
    return make_synthetic(n_per_class=10, seed=0)


def test_synthetic_batches(synthetic_table):
    dm = ConceptDataModule("synthetic", table=synthetic_table, batch_size=8)
    dm.setup("fit")
    x, c, y = next(iter(dm.train_dataloader()))
    assert x.shape == (8, 3, 64, 64) and x.dtype == torch.float32
    assert c.shape == (8, dm.n_concepts) and c.dtype == torch.float32
    assert y.dtype == torch.int64 and y.shape == (8,)
    assert dm.concept_groups and "shape" in dm.concept_groups
    assert dm.class_names[0] == "class_00" and dm.input_kind == "image"
    sizes = {p: len(dm.datasets[p]) for p in ("train", "val", "test", "novel")}
    assert sizes == {"train": 120, "val": 40, "test": 40, "novel": 30}
    # evaluation keeps the whole image: normalised pixels equal the raw image
    xe, _, _ = dm.datasets["test"][0]
    raw = torch.from_numpy(synthetic_table.load(int(dm.datasets["test"].indices[0]))).permute(2, 0, 1)
    mean = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)
    torch.testing.assert_close(xe, (raw.float() / 255 - mean) / std)


def test_default_builds_synthetic_and_shuffle_is_seeded():
    kw = {"dataset_kwargs": {"n_per_class": 4, "n_heldout": 2}, "batch_size": 16}
    a, b = ConceptDataModule(**kw, seed=1), ConceptDataModule(**kw, seed=1)
    ya = torch.cat([y for _, _, y in a.train_dataloader()])
    yb = torch.cat([y for _, _, y in b.train_dataloader()])
    assert torch.equal(ya, yb)
    assert a.table.info["seed"] == 1
    assert len(a.novel_dataloader().dataset) == 2 * 2


def test_fold_removes_heldout_classes(synthetic_table, tmp_path: Path):
    dm = ConceptDataModule("synthetic", table=synthetic_table, fold=1, n_folds=5, fold_seed=4)
    dm.setup()
    fold = dm.folds[1]
    assert dm.fold_classes == 20 and len(fold.held_out) == 4
    for p in ("train", "val", "test"):
        assert not np.isin(dm.datasets[p].targets, fold.held_out).any()
    assert set(dm.datasets["novel"].targets.tolist()) == set(fold.held_out)
    path = dm.save_folds(tmp_path / "folds.json")
    again = ConceptDataModule("synthetic", table=synthetic_table, fold=1, folds_path=str(path))
    assert again.folds == dm.folds
    described = again.describe()
    assert described["fold_held_out"] == list(fold.held_out)
    json.dumps(described)  # saved with a run


def test_cub_fake_with_transforms(fake_cub: Path):
    dm = ConceptDataModule(
        "cub", data_root=None, dataset_kwargs={"root": str(fake_cub)}, image_size=32, batch_size=4
    )
    x, c, y = next(iter(dm.train_dataloader()))
    assert x.shape == (4, 3, 32, 32) and c.shape == (4, 112)
    xv, _, _ = next(iter(dm.val_dataloader()))
    assert xv.shape[1:] == (3, 32, 32)
    assert "has_part0" in dm.concept_groups
    assert dm.describe()["info"]["concept_source"] == "image_majority_vote"
    loader = dm.eval_dataloader("train")
    assert len(loader.dataset.sample_ids) == len(dm.datasets["train"])


def test_awa2_fake_and_features(fake_awa2: Path):
    dm = ConceptDataModule("awa2", dataset_kwargs={"root": str(fake_awa2)}, image_size=16, batch_size=2)
    x, c, y = next(iter(dm.test_dataloader()))
    assert x.shape == (2, 3, 16, 16) and c.shape == (2, 85)
    assert dm.concept_groups is None
    fm = ConceptDataModule("awa_features", dataset_kwargs={"root": str(fake_awa2)}, batch_size=5)
    x, c, y = next(iter(fm.train_dataloader()))
    assert x.shape == (5, 6) and x.dtype == torch.float32 and fm.n_features == 6
    assert fm.input_kind == "features"


def test_workers(synthetic_table):
    dm = ConceptDataModule("synthetic", table=synthetic_table, batch_size=32, num_workers=2)
    batches = list(dm.val_dataloader())
    assert sum(len(b[2]) for b in batches) == 40


def test_unknown_dataset_and_option():
    with pytest.raises(ValueError, match="Did you mean 'synthetic'"):
        ConceptDataModule("synthetc")
    with pytest.raises(TypeError, match="unknown option"):
        load_dataset("synthetic", n_per_klass=3)


def test_train_transform_shapes():
    t = build_transform(48, train=True, crop_scale=(0.5, 1.0))
    img = np.zeros((100, 80, 3), dtype=np.uint8)
    assert t(img).shape == (3, 48, 48)
    e = build_transform(48, train=False)
    assert e(img).shape == (3, 48, 48)
