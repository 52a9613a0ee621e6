"""``evaluate-interventions`` on a tiny run directory, and the run-level intervention API."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest
import yaml

from cbm.data import ConceptDataModule
from cbm.data.concept_tables import load_concept_table, save_concept_table
from cbm.heads import load_head
from cbm.heads.fit import fit_head
from cbm.interventions import InterventionSettings, evaluate_interventions, load_concepts, open_head
from cbm.interventions.cli import evaluate_interventions_main
from cbm.interventions.report import _shown_ks

DATA = {"dataset": "synthetic", "dataset_kwargs": {"n_per_class": 12, "n_classes": 6, "n_heldout": 2},
        "image_size": 32}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A run without a trained detector: the world's true concepts with noise, then fit-head."""
    run = tmp_path_factory.mktemp("interventions") / "run"
    (run / "concepts").mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump({"data": DATA}))
    dm = ConceptDataModule(**DATA)
    table = dm.table
    rng = np.random.default_rng(0)
    for split in ("train", "val", "test", "novel"):
        rows = table.indices(split)
        labels = table.concepts[rows]
        probs = np.clip(0.15 + 0.7 * labels + rng.normal(0, 0.15, labels.shape), 0, 1)
        save_concept_table(run / "concepts" / f"{split}.npz", probs=probs.astype(np.float32),
                           concept_labels=labels, y=table.y[rows], concept_names=table.concept_names,
                           class_names=table.class_names, sample_ids=table.sample_ids[rows], split=split,
                           concept_groups=dm.concept_groups)
    fit_head(run, run, heads=["ferl-deep", "lr"])
    return run


def test_tables_carry_the_data_sets_groups(tiny_run):
    table = load_concept_table(tiny_run / "concepts" / "test.npz")
    assert table.concept_groups[:7] == ["shape"] * 6 + ["colour"]
    with np.load(tiny_run / "concepts" / "test.npz") as z:
        assert "concept_groups" in z.files


def test_run_level_intervention_and_explanation(tiny_run, monkeypatch):
    run = load_concepts(tiny_run)
    saved = tiny_run / "head" / "ferl-deep" / "calibrated"
    assert (saved / "current.json").is_file() and not (saved / "head.json").exists()  # a versioned save

    def refit(*args, **kwargs):
        raise AssertionError("a sequential head must be fit-head's saved head, not a refit")

    # a refit had other rules (20 where fit-head's head had 173 on the demo run)
    monkeypatch.setattr("cbm.interventions.run.make_head", refit)
    rh = open_head(run, "ferl-deep", "sequential")
    monkeypatch.undo()
    assert rh.groups.n_groups == 7 and all(rh.groups.exclusive)
    X = rh.concepts("test")
    np.testing.assert_array_equal(rh.head.predict_proba(X), load_head(saved).predict_proba(X))
    done, out = rh.intervene("test", {"colour": "red"}, rows=[0, 1])
    red = rh.groups.concept_index("colour::red")
    assert (done.X[:2, red] == 1).all() and np.array_equal(done.X[2:], rh.concepts("test")[2:])
    assert out.proba.shape == (len(done.X), 6) and out.sets is not None and out.ood is not None
    ex = rh.explain("test", 0, {"colour": "red"})
    assert any(r["concept"] == "colour::red" and r["after"] == 1.0 for r in ex.intervened)
    independent = open_head(run, "lr", "independent")
    assert independent.expert.mode == "percentiles" and np.allclose(independent.expert.low, 0)
    with pytest.raises(ValueError, match="unknown fit"):
        open_head(run, "lr", "joint")


def test_evaluate_interventions_writes_curves_tables_and_figure(tiny_run):
    settings = InterventionSettings(heads=("ferl-deep", "lr"), max_rows=10)
    result = evaluate_interventions([tiny_run], settings)
    folder = tiny_run / "interventions"
    for name in ("curves.csv", "true_concepts.csv", "interventions.md", "interventions.png", "summary.json"):
        assert (folder / name).is_file(), name
    frame = pd.read_csv(folder / "curves.csv")
    assert set(frame["policy"]) == {"random", "uncertainty", "ectp", "evidence"}
    assert set(frame[frame["policy"] == "evidence"]["head"]) == {"ferl-deep"}
    assert set(frame["split"]) == {"test", "novel"} and frame["k"].max() == 7
    truth = pd.read_csv(folder / "true_concepts.csv")
    full = frame[(frame["split"] == "test") & (frame["k"] == 7)]
    for _, row in truth.iterrows():
        got = full[(full["head"] == row["head"]) & (full["fit"] == row["fit"])]["accuracy"]
        assert np.allclose(got, row["true_concepts_accuracy"])
    novel = frame[(frame["split"] == "novel") & (frame["head"] == "ferl-deep")]
    assert novel["accuracy"].isna().all() and novel["auroc"].between(0, 1).all()
    # the OOD score is each FERL head's own kind, the one predict flags with, and the report names it
    kinds = truth.set_index(["head", "fit"])["ood_kind"]
    saved = load_head(tiny_run / "head" / "ferl-deep" / "calibrated")
    assert kinds["ferl-deep", "sequential"] == saved.ood_kind
    assert kinds["ferl-deep", "independent"] in ("typical", "energy") and kinds["lr"].isna().all()
    text = (folder / "interventions.md").read_text()
    assert f"| {kinds['ferl-deep', 'sequential']} |" in text.split("## Held-out classes")[1]
    assert "## Test accuracy (%) after k answered groups" in text and "evidence (ours)" in text
    assert json.loads((folder / "summary.json").read_text())["n_groups"] == 7
    assert result["info"]["rows"]["test"] == 10


def test_the_console_script_reports_bad_input(tiny_run, tmp_path, capsys):
    with pytest.raises(SystemExit, match="evaluate-interventions: error: .* is not a folder"):
        evaluate_interventions_main(["--run", str(tmp_path / "missing")])
    with pytest.raises(SystemExit, match="unknown or no policies \\['oracle'\\]"):
        evaluate_interventions_main(["--run", str(tiny_run), "--policies", "oracle"])
    with pytest.raises(SystemExit, match="several runs need --out"):
        evaluate_interventions_main(["--run", str(tiny_run), str(tiny_run)])
    evaluate_interventions_main(["--run", str(tiny_run), str(tiny_run), "--out", str(tmp_path / "both"),
                                 "--heads", "lr", "--fits", "independent", "--splits", "test",
                                 "--max-rows", "10", "--ks", "1", "3"])
    assert "Test accuracy" in capsys.readouterr().out
    frame = pd.read_csv(tmp_path / "both" / "curves.csv")
    assert sorted(frame["k"].unique()) == [0, 1, 3, 7] and frame["run"].nunique() == 1
    # one run with --out: the results go there too (they were written only inside the run)
    evaluate_interventions_main(["--run", str(tiny_run), "--out", str(tmp_path / "one"), "--heads", "lr",
                                 "--fits", "independent", "--splits", "test", "--max-rows", "10"])
    assert pd.read_csv(tmp_path / "one" / "curves.csv")["head"].unique().tolist() == ["lr"]
    assert (tiny_run / "interventions" / "curves.csv").is_file()


def test_an_open_world_folder_counts_each_fold_as_a_run(tiny_run, tmp_path):
    out = tmp_path / "openworld"
    for fold in ("seed0/fold0", "seed1/fold0"):  # folds keep tables and calibration, not heads
        shutil.copytree(tiny_run / "concepts", out / fold / "concepts")
        shutil.copy(tiny_run / "calibration.json", out / fold / "calibration.json")
    (out / "folds.json").write_text("{}")
    settings = InterventionSettings(heads=("ferl-deep",), fits=("sequential",), policies=("evidence",),
                                    max_rows=8)
    result = evaluate_interventions([out], settings)
    assert set(result["frame"]["run"]) == {"openworld/seed0/fold0", "openworld/seed1/fold0"}
    assert (out / "interventions" / "interventions.md").is_file()
    assert (out / "seed1" / "fold0" / "interventions" / "curves.csv").is_file()
    assert "mean ± std over 2 runs" in (out / "interventions" / "interventions.md").read_text()


def test_one_run_given_as_a_path_is_one_run(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing is not a folder"):
        evaluate_interventions(str(tmp_path / "missing"))  # was read character by character: "t is not"


def test_the_report_shows_a_spread_of_k_on_many_groups():
    # CUB-50 (28 groups) crashed after 8 minutes of curves: a list indexed with a numpy array
    assert _shown_ks(list(range(29))) == [0, 1, 2, 3, 4, 10, 16, 22, 28]
    assert _shown_ks([0, 5, 9]) == [0, 5, 9]


def test_the_curves_are_written_before_the_report(tiny_run, tmp_path, monkeypatch):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run, ignore=shutil.ignore_patterns("interventions"))

    def broken(*args, **kwargs):
        raise RuntimeError("report failed")

    monkeypatch.setattr("cbm.interventions.protocol.curves_figure", broken)  # drawn first, before
    monkeypatch.setattr("cbm.interventions.protocol.curves_markdown", broken)
    settings = InterventionSettings(heads=("lr",), fits=("independent",), splits=("test",), max_rows=10)
    with pytest.raises(RuntimeError, match="report failed"):
        evaluate_interventions([run], settings)
    frame = pd.read_csv(run / "interventions" / "curves.csv")  # the computation is kept
    assert frame["k"].max() == 7 and set(frame["head"]) == {"lr"}
    assert (run / "interventions" / "true_concepts.csv").is_file()
    assert not (run / "interventions" / "interventions.md").exists()
    assert not (run / "interventions" / "interventions.png").exists()


def _variant(tiny_run, folder, change):
    """A copy of the tiny run whose concept tables have ``change(fields)`` applied."""
    shutil.copytree(tiny_run, folder, ignore=shutil.ignore_patterns("interventions"))
    for path in (folder / "concepts").glob("*.npz"):
        t = load_concept_table(path)
        fields = {"probs": t.probs, "concept_labels": t.concept_labels, "y": t.y,
                  "concept_names": list(t.concept_names), "class_names": list(t.class_names),
                  "sample_ids": t.sample_ids, "split": t.split, "concept_groups": list(t.concept_groups)}
        change(fields)
        save_concept_table(path, **fields)
    return folder


@pytest.mark.parametrize(("change", "message"), [
    (lambda f: f["class_names"].__setitem__(0, "zebra"), r"classes \(only in the first: \['class_00'\], "
                                                         r"only in the second: \['zebra'\]\)"),
    (lambda f: f["concept_groups"].__setitem__(0, "form"),
     r"concept groups \(only in the first: \[\"shape: .*\"form: .*\]\)"),
    (lambda f: f["class_names"].reverse(), r"classes \(the same ones in another order\)"),
])
def test_runs_that_do_not_match_are_not_averaged(tiny_run, tmp_path, change, message):
    # runs of other classes or groups were averaged into "100.0 ± 0.0"
    other = _variant(tiny_run, tmp_path / "other", change)
    settings = InterventionSettings(heads=("lr",), fits=("independent",), splits=("test",), max_rows=10)
    expected = rf"runs 'run' and 'other' have other {message}: .*cannot be averaged"
    with pytest.raises(ValueError, match=expected):
        evaluate_interventions([tiny_run, other], settings, tmp_path / "both")
    assert not (other / "interventions").exists()  # refused before anything was computed


def test_splits_without_test_and_an_out_that_is_a_file_are_named(tiny_run, tmp_path):
    # --splits novel said "the test split has no rows of training classes"; --out FILE "File exists"
    with pytest.raises(ValueError, match=r"splits must include 'test' .*got \['novel'\]"):
        InterventionSettings(splits=("novel",))
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="--out .*file is a file, not a folder"):
        evaluate_interventions([tiny_run], InterventionSettings(heads=("lr",)), tmp_path / "file")
