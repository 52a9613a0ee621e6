"""evaluate-shift on a tiny synthetic run: the table, the cache keyed by run and corruption, a stop
mid-run, one operating point with predict, and bad input."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

import cbm.shift.images as images
from cbm.detector.cli import train_detector_main
from cbm.detector.train import train_detector
from cbm.heads.fit import fit_head_main
from cbm.predict import Pipeline
from cbm.shift import ShiftSettings, evaluate_shift
from cbm.shift.cli import evaluate_shift_main
from cbm.shift.report import COLUMNS

ROOT = Path(__file__).resolve().parents[3]
SMALL = ShiftSettings(corruptions=("gaussian_noise", "defocus_blur"), severities=(1, 5), max_rows=12,
                      presets=(), num_workers=0)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("shift") / "run"
    world = {"n_per_class": 10, "n_classes": 6, "n_heldout": 2, "p_swap": 0.1}
    train_detector_main(["--config", str(ROOT / "configs" / "detector" / "synthetic.yaml"),
                         "--run-dir", str(out), "--data.dataset_kwargs", json.dumps(world),
                         "--data.image_size", "32", "--model.backbone", "test_resnet",
                         "--trainer.max_epochs", "1", "--trainer.accelerator", "cpu",
                         "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"])
    fit_head_main(["--run", str(out), "--heads", "ferl-deep,lr", "--compare-train-concepts", "false"])
    return out


def test_the_shift_table_has_a_row_per_method_corruption_and_severity(run, tmp_path):
    frame = evaluate_shift(run, SMALL, tmp_path / "out")
    assert tuple(frame.columns) == COLUMNS
    assert frame.equals(pd.read_csv(tmp_path / "out" / "shift.csv").astype(frame.dtypes.to_dict()))
    methods = ["product", "ferl-deep-ds-conformal", "lr-lac", "lr-aps", "lr-raps", "lr-raps-nonempty",
               "lr-energy", "mahalanobis-concepts", "mahalanobis-features"]
    assert list(dict.fromkeys(frame.method)) == methods
    assert len(frame) == len(methods) * (1 + 2 * 2)
    clean = frame[frame.severity == 0]
    assert set(clean.corruption) == {"none"} and clean.detect_auroc.isna().all()
    shifted = frame[frame.severity > 0]
    assert (shifted.n == 12).all() and shifted.detect_auroc.between(0, 1).all()
    sets = frame[frame.method.isin(methods[:6])]
    assert sets.coverage.between(0, 1).all() and (sets.answered_right <= sets.coverage + 1e-12).all()
    assert frame[frame.method == "lr-energy"].coverage.isna().all()
    meta = json.loads((tmp_path / "out" / "shift.json").read_text())
    assert meta["product"]["head"] == "ferl-deep" and meta["product"]["operating_point"]["max_set_size"] == 10
    assert meta["corruptions"] == list(SMALL.corruptions) and meta["rows"] == 12
    assert (tmp_path / "out" / "coverage.png").read_bytes()[:4] == b"\x89PNG"
    text = (tmp_path / "out" / "shift.md").read_text()
    assert "## Coverage (%)" in text and "FERL-deep (product)" in text
    assert "Per corruption at severity" in text


KILL_AFTER_FIRST_CELL = """
import os, signal
import cbm.shift.images as images
from cbm.shift import ShiftSettings, evaluate_shift
real = images.atomic_write_bytes
def write_then_die(*args, **kwargs):
    real(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)  # killed right after the first cell is cached
images.atomic_write_bytes = write_then_die
evaluate_shift({run!r}, ShiftSettings(**{settings!r}), {out!r})
"""


def test_the_cache_is_keyed_by_run_and_corruption_and_a_killed_run_resumes(run, tmp_path, monkeypatch, child):
    out = tmp_path / "out"
    code = KILL_AFTER_FIRST_CELL.format(run=str(run), settings=SMALL.as_dict(), out=str(out))
    assert child.python(code, tmp_path / "err.txt") == -9  # SIGKILL
    cache = list((out / "cache").iterdir())
    assert len(cache) == 1 and len(cache[0].name) == 16  # one folder per run (its detector)
    first = sorted(p.name for p in cache[0].iterdir())
    assert len(first) == 1 and first[0].startswith("gaussian_noise-1-seed0-")  # the finished cell, whole
    assert not (out / "shift.csv").exists()  # nothing half-written
    calls = []
    real = images.detector_outputs
    monkeypatch.setattr(images, "detector_outputs", lambda *a, **k: calls.append(1) or real(*a, **k))
    frame = evaluate_shift(run, SMALL, out)
    assert len(calls) == 3  # the other three cells; the first is read back
    calls.clear()
    again = evaluate_shift(run, SMALL, out)
    assert calls == [] and again.equals(frame)  # every cell from the cache, the same table
    names = sorted(p.name for p in cache[0].iterdir())  # the cell's corruption, severity, seed, rows
    assert [n.rsplit("-", 1)[0] for n in names] == [f"{c}-{v}-seed0" for c in sorted(SMALL.corruptions)
                                                    for v in SMALL.severities]


def test_every_command_reads_the_same_operating_point(run):
    """predict's rows and the shift table's clean product row come from the same decision."""
    pipe = Pipeline.from_run(run, device="cpu")
    tables = {s: np.load(run / "concepts" / f"{s}.npz") for s in ("test",)}
    test = tables["test"]
    pred = pipe.predict_concepts(test["probs"], feature_score=test["feature_score"])
    frame = evaluate_shift(run, ShiftSettings(corruptions=("fog",), severities=(1,), max_rows=4, presets=(),
                                              num_workers=0), run / "shift_check")
    product = frame[(frame.method == "product") & (frame.severity == 0)].iloc[0]
    names = np.asarray(test["class_names"])[test["y"]]
    covered = np.mean([r["abstained"] or n in r["set"] for r, n in zip(pred.rows, names, strict=True)])
    assert product.coverage == pytest.approx(covered)
    assert product.abstention == pytest.approx(np.mean([r["abstained"] for r in pred.rows]))


@pytest.mark.parametrize("change, message", [
    ({"corruptions": ("gaussian_nois",)}, "unknown corruption"),
    ({"corruptions": ("saturate",)}, "unknown corruption"),  # a validation corruption: never evaluated
    ({"severities": (0,)}, "1-5"),
    ({"severities": (6,)}, "1-5"),
    ({"max_rows": 0}, "max_rows must be"),
    ({"product": "lr"}, "FERL heads"),
])
def test_bad_settings_are_named(change, message):
    with pytest.raises(ValueError, match=message):
        ShiftSettings(**{**SMALL.as_dict(), **change})


def test_bad_runs_and_a_missing_package_are_named(run, tmp_path, monkeypatch):
    with pytest.raises(SystemExit, match="evaluate-shift: error: .*is not a run made by train-detector"):
        evaluate_shift_main(["--run", str(tmp_path / "nothing"), "--out", str(tmp_path / "o")])
    rng = np.random.default_rng(0)
    from cbm.data import ConceptDataModule
    from cbm.data.tables import FeatureTable
    x = rng.normal(size=(80, 6)).astype(np.float32)
    concepts = (x[:, :3] > 0).astype(np.uint8)
    table = FeatureTable(features=x, name="random", sample_ids=[f"v{i}" for i in range(80)],
                         y=concepts[:, 0] * 2 + concepts[:, 1], concepts=concepts,
                         split=np.array(["train", "train", "val", "test"] * 20),
                         class_names=["a", "b", "c", "d"],
                         concept_names=["p", "q", "r"], class_concepts=np.zeros((4, 3), dtype=np.uint8))
    feats = tmp_path / "features"
    train_detector(ConceptDataModule(dataset="awa_features", table=table, batch_size=16), run_dir=feats,
                   trainer={"max_epochs": 1, "accelerator": "cpu", "enable_progress_bar": False,
                            "enable_model_summary": False})
    (feats / "config.yaml").write_text(yaml.safe_dump({"data": {"dataset": "awa_features"}}))
    with pytest.raises(ValueError, match="a run without image paths"):
        evaluate_shift(feats, SMALL, tmp_path / "o2")
    monkeypatch.setitem(sys.modules, "imagecorruptions", None)
    with pytest.raises(ImportError, match="imagecorruptions-imaug"):
        evaluate_shift(run, SMALL, tmp_path / "o3")
