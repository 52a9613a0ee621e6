"""train-detector as a job: batches of one, signals at any phase, one-line errors, the lock."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from PIL import Image

from cbm.detector.cli import train_detector_main

REPO = Path(__file__).resolve().parents[3]
#: The reported command on the shipped synthetic config (there: 120 training images in batches of 7),
#: at test size: 24 training images, timm's 0.4 M-parameter test ResNet, 32-pixel images.
ISSUE_ARGS = ["--config", str(REPO / "configs" / "detector" / "synthetic.yaml"),
              "--data.dataset_kwargs", '{"n_per_class": 5, "n_classes": 8, "n_heldout": 2}',
              "--data.image_size", "32", "--data.batch_size", "8", "--trainer.max_epochs", "1",
              "--model.backbone", "test_resnet", "--trainer.accelerator", "cpu",
              "--trainer.enable_progress_bar", "false", "--export_splits", "[test]"]


def _last_line(path: Path) -> str:
    return path.read_text().strip().splitlines()[-1]


def test_a_last_training_batch_of_one_image_trains(tmp_path):
    """24 training images in batches of 23 leave one image: BatchNorm used to fail on it."""
    train_detector_main([*ISSUE_ARGS, "--run-dir", str(tmp_path / "r"), "--data.batch_size", "23"])
    metrics = json.loads((tmp_path / "r" / "detector" / "metrics.json").read_text())
    assert metrics["epochs"] == 1 and metrics["global_step"] == 1 and metrics["splits"]["test"]["n"] == 8


@pytest.mark.parametrize("signum, where, doing", [
    (signal.SIGINT, "training_step", "training the detector; the checkpoints of the epochs finished so far"),
    (signal.SIGTERM, "predict_step", "exporting the concept tables; training finished: the checkpoints are"),
])
def test_a_signal_at_any_phase_exits_non_zero_saying_what_was_kept(tmp_path, child, signum, where, doing):
    """Lightning used to swallow SIGTERM during the export (exit 0) and turn SIGINT into a bare exit 1."""
    run, err = tmp_path / "r", tmp_path / "stderr"
    argv = [*ISSUE_ARGS, "--run-dir", str(run)]
    # the export predicts through a wrapper that gives features and probabilities in one pass
    owner = "cbm.detector.export import _Outputs as Owner" if where == "predict_step" else \
        "cbm.detector.module import ConceptDetector as Owner"
    status = child.python(f"""
import os
from cbm.detector.cli import train_detector_main
from {owner}
real = Owner.{where}
def step(self, *args, **kwargs):  # the signal arrives in the middle of this phase
    os.kill(os.getpid(), {int(signum)})
    return real(self, *args, **kwargs)
Owner.{where} = step
train_detector_main({argv!r})
""", stderr=err)
    assert status == 128 + signum, err.read_text()[-2000:]
    name = signal.Signals(signum).name
    assert _last_line(err).startswith(f"train-detector: error: interrupted by {name} while {doing}")
    assert not (run / "concepts").exists() and not (run / "detector" / "metrics.json").exists()


def test_a_truncated_last_checkpoint_is_one_error_line(tmp_path):
    ckpt = tmp_path / "r" / "detector" / "checkpoints" / "last.ckpt"
    ckpt.parent.mkdir(parents=True)
    ckpt.write_bytes(b"PK\x03\x04" + b"\0" * 64)  # the first bytes of a torch zip, cut short
    with pytest.raises(SystemExit, match=r"^train-detector: error: checkpoint .*last\.ckpt cannot be read, "
                                         r"it is truncated or damaged .*--ckpt-path best") as info:
        train_detector_main([*ISSUE_ARGS, "--run-dir", str(tmp_path / "r"), "--ckpt-path", "last"])
    assert "\n" not in info.value.code


def test_a_corrupt_jpeg_in_an_epoch_is_one_error_line(tmp_path, awa2_writer):
    base = awa2_writer(tmp_path / "data", n_images=6, features=False)
    bad = base / "JPEGImages" / "beaver" / "beaver_10003.jpg"
    bad.write_bytes(bad.read_bytes()[:200])  # a header that opens, pixels that do not decode
    with pytest.raises(OSError), Image.open(bad) as img:
        img.load()
    args = ["--run-dir", str(tmp_path / "r"), "--data.dataset", "awa2", "--data.data_root",
            str(tmp_path / "data"), "--data.image_size", "32", "--data.batch_size", "4", "--model.backbone",
            "test_resnet", "--trainer.max_epochs", "1", "--trainer.accelerator", "cpu",
            "--trainer.enable_progress_bar", "false"]
    with pytest.raises(SystemExit, match=rf"^train-detector: error: cannot read image {bad}") as info:
        train_detector_main(args)
    assert "\n" not in info.value.code


def test_a_run_directory_another_job_writes_is_refused(tmp_path, child):
    run = tmp_path / "r"
    with child.holding_lock(run):
        with pytest.raises(SystemExit, match=rf"^train-detector: error: {run} is being written by another "
                                             rf"process \(pid \d+, `.*`, since "):
            train_detector_main([*ISSUE_ARGS, "--run-dir", str(run)])
    assert not (run / "config.yaml").exists()



def test_sigterm_during_the_export_stops_a_library_call_too(tmp_path, monkeypatch):
    """Without a console script's handler, Lightning notes SIGTERM during predict and used to finish."""
    from cbm.data import ConceptDataModule
    from cbm.detector import train_detector
    from cbm.detector.export import _Outputs

    real = _Outputs.predict_step

    def predict_step(self, *args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(_Outputs, "predict_step", predict_step)
    received = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))  # not death
    try:
        with pytest.raises(SystemExit, match="interrupted by SIGTERM while exporting the concept tables"):
            data = {"n_per_class": 5, "n_classes": 8, "n_heldout": 2}
            train_detector(ConceptDataModule(dataset_kwargs=data, image_size=32, batch_size=8),
                           run_dir=tmp_path, model={"backbone": "test_resnet"}, export_splits=["test"],
                           trainer={"accelerator": "cpu", "max_epochs": 1, "enable_progress_bar": False})
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert received and not (tmp_path / "concepts").exists()
