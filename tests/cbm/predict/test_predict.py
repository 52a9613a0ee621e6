"""predict and Pipeline: the custom-folder example trains, fits heads and predicts; the pipeline
reproduces the run's own concept tables; thresholds, inputs and unreadable files."""

from __future__ import annotations

import json
import logging
import os
import runpy
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from PIL import Image

from cbm.concepts.calibration import crossfit_calibrate
from cbm.data.concept_tables import load_concept_table
from cbm.detector.cli import train_detector_main
from cbm.heads import load_head
from cbm.heads.fit import fit_head_main
from cbm.predict import Pipeline, predict_main, run_predict
from cbm.predict.pipeline import COLUMNS, Predictions
from ferl.io.persist import current_folder
from ferl.metrics import fit_acceptance_threshold

ROOT = Path(__file__).resolve().parents[3]
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def example(tmp_path_factory) -> Path:
    write = runpy.run_path(str(ROOT / "scripts" / "make_custom_example.py"))["write_example"]
    return write(tmp_path_factory.mktemp("custom") / "example")


@pytest.fixture(scope="module")
def run(example) -> Path:
    """train-detector + fit-head on the custom example, as the README says (shorter training)."""
    out = example.parent / "run"
    train_detector_main(["--config", str(ROOT / "configs" / "detector" / "custom.yaml"),
                         "--run-dir", str(out),
                         "--data.dataset_kwargs", json.dumps({"root": str(example)}),
                         "--trainer.max_epochs", "3", "--trainer.accelerator", "cpu",
                         "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"])
    fit_head_main(["--config", str(ROOT / "configs" / "head" / "default.yaml"), "--run", str(out),
                   "--heads", "ferl-deep,lr"])
    return out


def test_custom_example_trains_fits_heads_and_predicts(example, run, tmp_path, capsys):
    folder = tmp_path / "new"
    shutil.copytree(example / "new_images", folder)
    (folder / "broken.png").write_bytes(b"not an image")
    (folder / "notes.txt").write_text("not an image file: ignored")
    predict_main(["--run", str(run), "--folder", str(folder), "--out", str(tmp_path / "out"),
                  "--threads", "2"])
    printed = capsys.readouterr().out
    assert "not predicted:" in printed and "broken.png: cannot read image" in printed
    assert "predicted 6 of 7 input(s)" in printed and "1 unreadable" in printed
    table = pd.read_csv(tmp_path / "out" / "predictions.csv")
    assert table["input"].tolist() == ["blue_square_00.png", "blue_square_01.png", "blue_square_02.png",
                                       "blue_square_03.png", "blue_square_04.png", "blue_square_05.png",
                                       "broken.png"]
    ok, bad = table.iloc[:6], table.iloc[6]
    assert set(ok["class"]) <= {"blue_circle", "blue_squares", "red_circle", "red_circles", "red_square"}
    assert bad["class"] != bad["class"]
    assert ok["error"].isna().all() and "cannot read image" in bad["error"]
    assert ((ok["set_size"] >= 1) & (ok["set_size"] <= 5)).all()
    as_text = pd.read_csv(tmp_path / "out" / "predictions.csv", dtype=str, keep_default_na=False)["set_size"]
    assert as_text.iloc[:6].str.fullmatch(r"[1-5]").all() and as_text.iloc[6] == ""  # "1", not "1.0"
    assert (ok["ood_flag"] == (ok["ood_score"] > ok["ood_threshold"])).all()
    assert (ok["ood_kind"] == "joint").all()  # fit-head's FERL-deep flags with its joint score
    assert ok["anomalous_attributes"].str.count(r"\(").eq(5).all()  # the top 5 of the 6 concepts
    rows = [json.loads(line) for line in (tmp_path / "out" / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 7 and rows[0]["set"] == ok["set"].iloc[0].split("|") and rows[6]["class"] is None
    page = (tmp_path / "out" / "predictions.md").read_text()
    assert "## 6. `blue_square_05.png`" in page and "Not predicted: " in page and "**Prediction: " in page
    assert "when its joint OOD score exceeds" in page and page.count("joint OOD score = ") == 6
    # each page names the sufficient rules of its prediction (FERL-deep reads learned weights)
    assert page.count("**Sufficient rules**: with the prior (") == 6
    for i in range(1, 7):
        assert (tmp_path / "out" / "predictions" / f"{i}.png").read_bytes()[:8] == PNG


def test_pipeline_reproduces_the_runs_concept_tables_and_threshold(example, run):
    pipe = Pipeline.from_run(run, device="cpu", batch_size=4)
    test = load_concept_table(run / "concepts" / "test.npz")
    probs, errors, warnings = pipe.concept_probs([example / "images" / sid for sid in test.sample_ids])
    assert not errors and not warnings
    np.testing.assert_allclose(probs, test.probs, atol=1e-6)  # same checkpoint, same eval transform
    head = json.loads((current_folder(run / "head" / "ferl-deep" / "calibrated") / "head.json").read_text())
    val = load_concept_table(run / "concepts" / "val.npz")
    # fit-head's threshold: the joint score (typicality and the learned weights' energy, standardised
    # on the same rows) of the val rows calibrated out of sample
    held_out = crossfit_calibrate(val.probs, val.concept_labels, val.concept_names, seed=0)
    reference = pipe.head.model_.ood_score(held_out, "joint")
    value = fit_acceptance_threshold(reference, 0.95)
    assert head["ood_threshold"] == {"kind": "joint", "accept": 0.95, "fitted_on": "val",
                                     "n": val.n_samples, "value": value}
    assert np.mean(reference > value) <= 0.05
    scores = pipe.head.model_.ood_score(pipe.calibrator.transform(val.probs), "joint")
    flags = [r["ood_flag"] for r in pipe.predict_concepts(val.probs).rows]
    assert flags == (scores > value).tolist()
    direct = pipe.predict([example / "images" / sid for sid in test.sample_ids])
    from_table = pipe.predict_concepts(test.probs, [str(s) for s in test.sample_ids])
    assert [r["class"] for r in direct.rows] == [r["class"] for r in from_table.rows]
    expected = pipe.head.predict(pipe.calibrator.transform(test.probs)).tolist()
    assert [r["class"] for r in direct.rows] == expected


def test_concepts_from_a_csv_or_a_table_give_the_same_rows(run, tmp_path):
    test = load_concept_table(run / "concepts" / "test.npz")
    names = test.concept_names[::-1]  # columns in another order
    frame = pd.DataFrame(test.probs[:, ::-1], columns=names)
    frame.insert(0, "sample_id", test.sample_ids)
    frame.to_csv(tmp_path / "c.csv", index=False)
    from_csv, _ = run_predict(str(run), concepts=str(tmp_path / "c.csv"), out=str(tmp_path / "a"), page=False)
    from_npz, files = run_predict(str(run), concepts=str(run / "concepts" / "test.npz"),
                                  out=str(tmp_path / "b"))
    assert [{**r, "true_class": None} for r in from_npz.rows] == from_csv.rows
    assert [r["true_class"] for r in from_npz.rows] == [test.class_names[c] for c in test.y]
    assert "true class" in files[-1].read_text() and not (tmp_path / "a" / "predictions.md").exists()
    frame.loc[1, names[2]] = 1.5
    frame.to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(ValueError, match=rf"row 3 \('{test.sample_ids[1]}'\), concept '{names[2]}' is '1.5'"):
        run_predict(str(run), concepts=str(tmp_path / "bad.csv"), out=str(tmp_path / "c"))
    frame.drop(columns=[names[0]]).to_csv(tmp_path / "short.csv", index=False)
    with pytest.raises(ValueError, match=rf"missing from .*short.csv: \['{names[0]}'\]"):
        run_predict(str(run), concepts=str(tmp_path / "short.csv"), out=str(tmp_path / "c"))


def test_no_predictions_still_have_the_columns():
    frame = Predictions(rows=[], inputs=[], explain=lambda i: None).frame()
    assert frame.empty and list(frame.columns) == list(COLUMNS)  # was a frame without columns
    assert str(frame["set_size"].dtype) == "Int64"


def test_in_memory_images_and_unreadable_inputs(example, run, tmp_path, capsys):
    pipe = Pipeline.from_run(run)
    image = Image.open(example / "new_images" / "blue_square_00.png")
    pred = pipe.predict([np.asarray(image), image, tmp_path / "missing.png", np.zeros((4, 4, 4), np.uint8)])
    assert [r["input"] for r in pred.rows[:2]] == ["image_0", "image_1"] and pred.n_errors == 2
    assert pred.rows[0]["class"] == pred.rows[1]["class"]
    assert pred.rows[0]["ood_score"] == pred.rows[1]["ood_score"]
    assert "no such file" in pred.rows[2]["error"] and "uint8 of shape (H, W, 3)" in pred.rows[3]["error"]
    assert pred.explain(2) is None and pred.explain(0).prediction == pred.rows[0]["class"]
    assert pred.frame().shape == (4, 18) and pipe.input_side == 32  # the run's image_size
    assert [r["warning"] for r in pred.rows] == [None] * 4  # 32 x 32 images, 32 px input
    assert all(list(r) == list(COLUMNS) for r in pred.rows) and list(pred.frame().columns) == list(COLUMNS)
    with pytest.raises(SystemExit, match="none of the 1 inputs could be read"):
        predict_main(["--run", str(run), "--images", str(tmp_path / "missing.png"), "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="exactly one of --images, --folder or --concepts"):
        predict_main(["--run", str(run), "--images", "a.png", "--folder", str(tmp_path)])
    with pytest.raises(SystemExit, match="no image files"):
        predict_main(["--run", str(run), "--folder", str(tmp_path)])
    with pytest.raises(SystemExit, match="head 'lr' is not a FERL head"):
        predict_main(["--run", str(run), "--head", "lr", "--folder", str(example / "new_images")])


def test_a_head_saved_without_a_threshold_gets_one_fitted_on_val(run, tmp_path, caplog):
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    path = copy / "head" / "ferl-deep" / "calibrated"
    head = load_head(path)
    stored, head.ood_threshold_ = head.ood_threshold_, None
    head.save(path)
    with caplog.at_level(logging.WARNING):
        pipe = Pipeline.from_run(copy)
    # refitted on the run's val table as the pipeline reads it (fit-head used the out-of-sample val rows)
    expected = fit_acceptance_threshold(head.model_.ood_score(pipe.calibrator.transform(
        load_concept_table(copy / "concepts" / "val.npz").probs), stored["kind"]), 0.95)
    assert "no stored OOD threshold" in caplog.text and pipe.threshold["kind"] == stored["kind"]
    assert pipe.threshold["value"] == expected
    (copy / "calibration.json").unlink()
    with pytest.raises(FileNotFoundError, match="the calibrated head needs the run's calibrator"):
        Pipeline.from_run(copy)


def test_a_concepts_csv_with_a_byte_order_mark_and_an_unknown_device(run, tmp_path):
    test = load_concept_table(run / "concepts" / "test.npz")
    frame = pd.DataFrame(test.probs[:3], columns=test.concept_names)
    frame.insert(0, "sample_id", test.sample_ids[:3])
    frame.to_csv(tmp_path / "bom.csv", index=False, encoding="utf-8-sig")  # as a spreadsheet saves it
    pred, _ = run_predict(str(run), concepts=str(tmp_path / "bom.csv"), out=str(tmp_path / "a"), page=False)
    assert [r["input"] for r in pred.rows] == list(test.sample_ids[:3])
    for device in ("tpu", "", "cpu:0", "meta"):
        with pytest.raises(ValueError, match="unknown device"):
            Pipeline.from_run(run, device=device)


def test_looping_and_broken_links_in_a_folder_get_rows_that_say_so(example, run, tmp_path, capsys):
    folder = tmp_path / "in"
    shutil.copytree(example / "new_images", folder)
    os.symlink("loop.png", folder / "loop.png")
    os.symlink("gone.png", folder / "broken.png")
    predict_main(["--run", str(run), "--folder", str(folder), "--out", str(tmp_path / "out"),
                  "--page", "false"])
    printed = capsys.readouterr().out
    assert "predicted 6 of 8 input(s)" in printed and "2 unreadable" in printed  # were "6 of 6"
    assert "loop.png: a symbolic link that loops" in printed
    assert "broken.png: a symbolic link to gone.png, which does not exist" in printed
    loops = tmp_path / "loops"
    loops.mkdir()
    for name in ("a.png", "b.png"):
        os.symlink(name, loops / name)
    with pytest.raises(SystemExit, match=r"none of the 2 inputs could be read \(.*a.png: a symbolic "
                                         r"link that loops"):  # was "no image files"
        predict_main(["--run", str(run), "--folder", str(loops), "--out", str(tmp_path / "out2")])


def test_a_missing_image_folder_fails_before_the_run_is_loaded(tmp_path):
    # the run does not exist either: the folder is checked first (it took 26 s of loading before)
    with pytest.raises(FileNotFoundError, match="image folder .*nowhere does not exist"):
        run_predict(str(tmp_path / "no-run"), folder=str(tmp_path / "nowhere"))


def test_the_transform_comes_from_the_checkpoint_not_the_editable_config(example, run, tmp_path, caplog):
    # editing config.yaml's image_size changed every prediction silently
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    config = yaml.safe_load((copy / "config.yaml").read_text())
    trained = config["data"]["image_size"]
    config["data"]["image_size"] = 2 * trained
    (copy / "config.yaml").write_text(yaml.safe_dump(config))
    with caplog.at_level(logging.WARNING):
        pipe = Pipeline.from_run(copy, device="cpu")
    assert f"gives image_size {2 * trained}, the detector was trained with {trained}" in caplog.text
    images = sorted((example / "new_images").glob("*.png"))[:3]
    expected = Pipeline.from_run(run, device="cpu").concept_probs(images)[0]
    np.testing.assert_array_equal(pipe.concept_probs(images)[0], expected)
