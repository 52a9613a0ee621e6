"""Frozen backbone (cached features) and cross-fitted train concepts."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from lightning.pytorch import Callback

from cbm.data import ConceptDataModule
from cbm.data.concept_tables import load_concept_tables
from cbm.data.tables import FeatureTable
from cbm.detector import ConceptDetector, concept_metrics
from cbm.detector import frozen as F
from cbm.detector.export import predict, predictor
from cbm.detector.train import train_detector

TINY = "test_resnet"
SYNTH = {"n_per_class": 5, "n_classes": 8, "n_heldout": 2}
TRAINER = {"accelerator": "cpu", "devices": 1, "enable_progress_bar": False, "enable_model_summary": False}


def _synthetic(image_size: int = 32) -> ConceptDataModule:
    return ConceptDataModule(dataset="synthetic", dataset_kwargs=SYNTH, image_size=image_size, batch_size=8)


def test_a_frozen_detector_trains_only_its_concept_layer_and_reads_features_or_images():
    torch.manual_seed(0)
    det = ConceptDetector(["a", "b"], backbone=TINY, freeze_backbone=True)
    assert not any(p.requires_grad for p in det.backbone.parameters())
    assert all(p.requires_grad for p in det.head.parameters())
    det.train()
    assert not det.backbone.training and det.head.training
    det.eval()
    x = torch.randn(3, 3, 32, 32)
    feats = det.features(x)
    torch.testing.assert_close(det(feats), det.head(feats))
    torch.testing.assert_close(det(x), det.head(feats))
    with pytest.raises(ValueError, match="freeze_backbone apply to image backbones"):
        ConceptDetector(["a"], input_kind="features", feature_dim=4, freeze_backbone=True)


class _BackboneAtStart(Callback):
    def on_fit_start(self, trainer, pl_module):
        self.state = {k: v.clone() for k, v in pl_module.backbone.state_dict().items()}


def test_frozen_job_caches_features_once_and_its_tables_equal_the_checkpoint_on_images(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    seen = _BackboneAtStart()
    kw = dict(model={"backbone": TINY, "freeze_backbone": True, "lr": 1e-2},
              trainer={**TRAINER, "max_epochs": 2}, export_splits=["train", "test"], feature_cache=cache)
    run = train_detector(_synthetic(), run_dir=tmp_path / "a", callbacks=[seen], **kw)
    assert len(list(cache.glob("*.npz"))) == 1
    ckpt = torch.load(run.best_checkpoint, weights_only=True)["state_dict"]
    for key, value in seen.state.items():  # the backbone did not move
        torch.testing.assert_close(ckpt[f"backbone.{key}"], value, rtol=0, atol=0)

    dm = _synthetic()
    model = ConceptDetector.from_checkpoint(run.best_checkpoint)
    on_images = predict(model, dm.eval_dataloader("test"), predictor("cpu"))
    table = load_concept_tables(tmp_path / "a", splits=("test",))["test"]
    np.testing.assert_allclose(table.probs, on_images, rtol=0, atol=1e-5)

    def no_extraction(*args, **kwargs):
        raise AssertionError("features were recomputed")

    monkeypatch.setattr(F, "predict", no_extraction)
    again = train_detector(_synthetic(), run_dir=tmp_path / "b", **kw)  # same images, same backbone
    np.testing.assert_array_equal(
        load_concept_tables(tmp_path / "b", splits=("test",))["test"].probs, table.probs)
    assert again.metrics["test"] == run.metrics["test"]
    monkeypatch.undo()
    train_detector(_synthetic(image_size=40), run_dir=tmp_path / "c", **kw)  # another transform
    assert len(list(cache.glob("*.npz"))) == 2


def _memorisable(n_train: int = 120, k: int = 4) -> ConceptDataModule:
    """One-hot row features and random concepts: a model can only memorise its training rows."""
    n = n_train + 40
    rng = np.random.default_rng(0)
    concepts = rng.integers(0, 2, size=(n, k)).astype(np.uint8)
    y = np.arange(n) % 3
    split = np.array(["train"] * n_train + ["val"] * 20 + ["test"] * 20)
    table = FeatureTable(features=np.eye(n, dtype=np.float32), name="rows",
                         sample_ids=[f"r{i}" for i in range(n)], y=y, concepts=concepts, split=split,
                         class_names=["a", "b", "c"],
                         concept_names=[f"c{j}" for j in range(k)], class_concepts=np.zeros((3, k), np.uint8))
    return ConceptDataModule(dataset="awa_features", table=table, batch_size=20)


def test_cross_fitted_train_concepts_come_from_detectors_that_did_not_see_the_row(tmp_path):
    run = train_detector(_memorisable(), run_dir=tmp_path, model={"hidden_dims": [], "lr": 0.3},
                         trainer={**TRAINER, "max_epochs": 15}, crossfit_folds=3, monitor="auroc")
    tables = load_concept_tables(tmp_path, splits=("train", "train_crossfit"))
    train, oof = tables["train"], tables["train_crossfit"]
    np.testing.assert_array_equal(oof.sample_ids, train.sample_ids)
    np.testing.assert_array_equal(oof.concept_labels, train.concept_labels)
    assert concept_metrics(train.probs, train.concept_labels)["auroc"] > 0.95  # memorised in-sample
    assert abs(concept_metrics(oof.probs, oof.concept_labels)["auroc"] - 0.5) < 0.15  # never seen
    assert run.metrics["train_crossfit"]["n"] == 120
    assert not list((tmp_path / "detector").glob("crossfit-*"))  # fold checkpoints are removed


def test_one_crossfit_fold_is_refused_before_training(tmp_path):
    with pytest.raises(ValueError, match=r"crossfit_folds must be 0 \(off\) or >= 2, got 1"):
        train_detector(_memorisable(), run_dir=tmp_path, model={"hidden_dims": []}, trainer=TRAINER,
                       crossfit_folds=1)
    assert not (tmp_path / "detector" / "checkpoints").exists()
