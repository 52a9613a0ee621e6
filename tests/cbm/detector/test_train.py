"""The train-detector job: CLI smoke run, exact resume, run-directory contents, features mode."""

from __future__ import annotations

import json
import logging
import os

import numpy as np
import pytest
import timm
import torch
import yaml
from lightning.pytorch import Callback
from lightning.pytorch.utilities.exceptions import SIGTERMException

from cbm.data import ConceptDataModule
from cbm.data.concept_tables import load_concept_tables
from cbm.data.tables import FeatureTable
from cbm.detector.checkpoint import check_table_matches_checkpoint
from cbm.detector.cli import train_detector_main
from cbm.detector.train import quiet_library_noise, train_detector

TINY = "test_resnet"  # timm's 0.4 M-parameter ResNet for tests
SYNTH = {"n_per_class": 5, "n_classes": 8, "n_heldout": 2}  # 24 train / 8 val / 8 test images


def _synthetic(**kwargs) -> ConceptDataModule:
    return ConceptDataModule(dataset="synthetic", dataset_kwargs=SYNTH, image_size=32,
                             batch_size=8, **kwargs)


def _trainer(**kwargs) -> dict:
    return {"accelerator": "cpu", "devices": 1, "enable_progress_bar": False,
            "enable_model_summary": False, **kwargs}


def test_cli_fast_dev_run_fills_the_run_directory(tmp_path, capsys):
    run = tmp_path / "run"
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(yaml.safe_dump({
        "data": {"dataset": "synthetic", "dataset_kwargs": SYNTH, "image_size": 32, "batch_size": 8},
        "model": {"backbone": TINY, "lr": 1e-3},
        "trainer": {"accelerator": "cpu", "max_epochs": 5, "enable_progress_bar": False},
        "export_splits": ["train", "val", "test", "novel"],
    }))
    train_detector_main(["--config", str(cfg), "--run-dir", str(run),
                         "--trainer.fast_dev_run", "true", "--model.dropout", "0.1"])
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["model"]["dropout"] == 0.1 and saved["trainer"]["fast_dev_run"] is True
    assert saved["run_dir"] == str(run)
    env = json.loads((run / "environment.json").read_text())
    assert env["seed"] == 0 and env["packages"]["timm"] == timm.__version__
    assert env["device"]["accelerator"] == "CPUAccelerator" and "commit" in env["git"]
    assert env["threads"]["torch"] == env["threads"]["available_cores"] == len(os.sched_getaffinity(0))
    tables = load_concept_tables(run, splits=("train", "val", "test", "novel"))
    assert {s: t.n_samples for s, t in tables.items()} == {"train": 24, "val": 8, "test": 8,
                                                           "novel": 4}
    assert tables["test"].n_concepts == 24 and tables["test"].concept_names[0] == "shape::circle"
    metrics = json.loads((run / "detector" / "metrics.json").read_text())
    assert metrics["global_step"] == 1 and metrics["best_checkpoint"] is None
    assert 0.0 <= metrics["splits"]["test"]["concept_acc"] <= 1.0
    assert "concept accuracy" in capsys.readouterr().out


def test_no_progress_bar_is_drawn_into_a_log_unless_asked_for(tmp_path, capsys):
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(yaml.safe_dump({
        "data": {"dataset": "synthetic", "dataset_kwargs": SYNTH, "image_size": 32, "batch_size": 8},
        "model": {"backbone": TINY}, "trainer": {"accelerator": "cpu", "enable_model_summary": False},
        "export_splits": ["test"],
    }))
    for flag, drawn in (([], False), (["--trainer.enable_progress_bar", "true"], True)):
        train_detector_main(["--config", str(cfg), "--run-dir", str(tmp_path / f"run{drawn}"),
                             "--trainer.fast_dev_run", "true", *flag])
        assert ("Epoch 0" in capsys.readouterr().out) is drawn  # pytest's stdout is not a terminal


def test_cli_reports_a_config_error_without_traceback(tmp_path):
    argv = ["--run-dir", str(tmp_path), "--data.dataset", "synthetic",
            "--data.dataset_kwargs", json.dumps(SYNTH), "--model.backbone", "resnet5O"]
    with pytest.raises(SystemExit, match=r"error: unknown timm backbone 'resnet5O'.*resnet50"):
        train_detector_main(argv)


class _Kill(Callback):
    """Simulates a job killed after its first epoch (the last checkpoint is on disk)."""

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        if trainer.current_epoch == 1:
            raise KeyboardInterrupt


def test_resume_after_kill_equals_uninterrupted_run(tmp_path):
    kw = dict(model={"backbone": TINY, "lr": 1e-3, "dropout": 0.2}, seed=7,
              trainer=_trainer(max_epochs=2, deterministic=True), export_splits=["test"])
    full = train_detector(_synthetic(), run_dir=tmp_path / "full", **kw)
    with pytest.raises((KeyboardInterrupt, SystemExit)):
        train_detector(_synthetic(), run_dir=tmp_path / "cut", callbacks=[_Kill()], **kw)
    ckpt = tmp_path / "cut" / "detector" / "checkpoints" / "last.ckpt"
    assert torch.load(ckpt, weights_only=True)["epoch"] == 0
    resumed = train_detector(_synthetic(), run_dir=tmp_path / "cut", ckpt_path="last", **kw)

    a = torch.load(full.last_checkpoint, weights_only=True)
    b = torch.load(resumed.last_checkpoint, weights_only=True)
    assert (a["epoch"], a["global_step"]) == (b["epoch"], b["global_step"]) == (1, 6)
    assert a["lr_schedulers"][0] == b["lr_schedulers"][0]
    lr_a = a["optimizer_states"][0]["param_groups"][0]["lr"]
    assert lr_a == b["optimizer_states"][0]["param_groups"][0]["lr"] < 1e-3
    for key, value in a["state_dict"].items():
        torch.testing.assert_close(b["state_dict"][key], value, rtol=0, atol=0, msg=key)
    state_a, state_b = a["optimizer_states"][0]["state"], b["optimizer_states"][0]["state"]
    for i in state_a:
        torch.testing.assert_close(state_b[i]["exp_avg_sq"], state_a[i]["exp_avg_sq"], rtol=0, atol=0)
    env = json.loads((tmp_path / "cut" / "environment.json").read_text())
    assert env["resumed_from"] == str(ckpt)
    table = load_concept_tables(tmp_path / "cut", splits=("test",))["test"]
    check_table_matches_checkpoint(table, resumed.best_checkpoint)
    np.testing.assert_array_equal(
        table.probs, load_concept_tables(tmp_path / "full", splits=("test",))["test"].probs)


class _Sigterm(Callback):
    """Lightning's reaction to SIGTERM: its loops raise SIGTERMException, a SystemExit of code None."""

    def on_train_epoch_end(self, trainer, pl_module):
        raise SIGTERMException()


def test_sigterm_during_training_exits_non_zero_with_a_message(tmp_path):
    with pytest.raises(SystemExit) as info:
        train_detector(_synthetic(), run_dir=tmp_path / "run", model={"backbone": TINY},
                       trainer=_trainer(max_epochs=3), export_splits=["test"], callbacks=[_Sigterm()])
    assert isinstance(info.value.code, str) and "interrupted by SIGTERM" in info.value.code  # exit status 1
    assert str(tmp_path / "run" / "detector" / "checkpoints") in info.value.code


def test_quiet_library_noise_drops_only_lightning_tips():
    from lightning.pytorch.utilities import rank_zero

    seen = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    rank_zero.rank_zero_module.log.addHandler(handler)
    try:
        quiet_library_noise()
        rank_zero.rank_zero_info("💡 Tip: For seamless cloud logging, try installing something")
        rank_zero.rank_zero_info("GPU available: False")
    finally:
        rank_zero.rank_zero_module.log.removeHandler(handler)
    assert seen == ["GPU available: False"]


def test_resume_from_checkpoint_with_other_concepts_is_refused(tmp_path):
    ckpt_dir = tmp_path / "run" / "detector" / "checkpoints"
    ckpt_dir.mkdir(parents=True)
    torch.save({"hyper_parameters": {"concept_names": ["shape::circle", "wing::red"]}},
               ckpt_dir / "last.ckpt")
    with pytest.raises(ValueError, match=r"missing from the data module: \[.wing::red.\]"):
        train_detector(_synthetic(), run_dir=tmp_path / "run", ckpt_path="last",
                       model={"backbone": TINY}, trainer=_trainer(max_epochs=1))
    with pytest.raises(FileNotFoundError, match="nope.ckpt"):
        train_detector(_synthetic(), run_dir=tmp_path / "run", ckpt_path=str(tmp_path / "nope.ckpt"),
                       model={"backbone": TINY}, trainer=_trainer(max_epochs=1))


def test_empty_export_split_is_refused_before_training(tmp_path):
    dm = ConceptDataModule(dataset="synthetic", image_size=32,
                           dataset_kwargs={**SYNTH, "n_heldout": 0})
    with pytest.raises(ValueError, match="'novel' has no samples"):
        train_detector(dm, run_dir=tmp_path, export_splits=["test", "novel"],
                       model={"backbone": TINY}, trainer=_trainer(max_epochs=1))
    assert not (tmp_path / "detector" / "checkpoints").exists()


def _feature_data(n: int = 800, d: int = 10, k: int = 4) -> ConceptDataModule:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, d)).astype(np.float32)
    concepts = (x[:, :k] > 0).astype(np.uint8)
    y = concepts[:, 0] * 2 + concepts[:, 1]
    table = FeatureTable(
        features=x, name="random", sample_ids=[f"v{i}" for i in range(n)], y=y,
        concepts=concepts, split=np.array(["train", "train", "val", "test"] * (n // 4)),
        class_names=["c0", "c1", "c2", "c3"], concept_names=[f"f{j}>0" for j in range(k)],
        class_concepts=np.zeros((4, k), dtype=np.uint8),
    )
    return ConceptDataModule(dataset="awa_features", table=table, batch_size=32)


def test_features_mode_job_with_imbalance_weights_and_wandb_offline(tmp_path):
    run = train_detector(
        _feature_data(), run_dir=tmp_path, model={"hidden_dims": [32], "lr": 1e-2},
        trainer=_trainer(max_epochs=6), pos_weight="imbalance", monitor="auroc", logger="wandb",
    )
    ckpt = torch.load(run.best_checkpoint, weights_only=True)
    assert ckpt["hyper_parameters"]["input_kind"] == "features"
    assert len(ckpt["hyper_parameters"]["pos_weight"]) == 4
    assert run.metrics["test"]["concept_acc"] > 0.85 and run.metrics["test"]["auroc"] > 0.95
    assert any((tmp_path / "detector" / "wandb").glob("offline-run-*"))
    assert (tmp_path / "detector" / "logs" / "version_0" / "metrics.csv").is_file()
