"""The fit-head job end to end on tiny synthetic concept tables, and its bad-input errors."""

from __future__ import annotations

import io
import json
import os
import signal
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cbm.concepts.calibration import ConceptCalibrator, concept_ece
from cbm.data.concept_tables import load_concept_table, save_concept_table
from cbm.heads import fit as fit_mod
from cbm.heads import load_head
from cbm.heads.fit import INPUTS, evaluate_head, fit_head, fit_head_main, fit_head_parser
from ferl.io.persist import current_folder, folder_lock

K = 8
CONCEPTS = [f"has_part::{j}" for j in range(K)]
SPLITS = {"train": 160, "val": 120, "test": 120}


def _write_tables(folder: Path, n_classes: int = 4, seed: int = 0, test_classes: int | None = None,
                  scale: int = 1) -> Path:
    """Write concepts/{train,val,test}.npz of an over-confident, biased synthetic detector."""
    rng = np.random.default_rng(seed)
    prototypes = rng.random((n_classes, K)) < 0.5
    bias = rng.normal(0, 1.0, K)
    classes = [f"class_{c:03d}" for c in range(n_classes)]
    for split, n in SPLITS.items():
        n = n * scale
        y = rng.integers(0, test_classes or n_classes, n) if split == "test" else np.arange(n) % n_classes
        labels = (prototypes[y] ^ (rng.random((n, K)) < 0.1)).astype(np.uint8)
        logits = 4.0 * (2.0 * labels - 1) + bias + rng.normal(0, 2.5, (n, K))
        probs = (1 / (1 + np.exp(-logits))).astype(np.float32)
        save_concept_table(folder / "concepts" / f"{split}.npz", probs=probs, concept_labels=labels, y=y,
                           concept_names=CONCEPTS, class_names=classes,
                           sample_ids=[f"{split}-{i}" for i in range(n)])
    return folder


def _rewrite(path: Path, **changes) -> None:
    """Rewrite an .npz table with some arrays replaced, bypassing validation."""
    with np.load(path, allow_pickle=False) as z:
        data = {k: z[k] for k in z.files}
    data.update(changes)
    buf = io.BytesIO()
    np.savez(buf, **data)
    path.write_bytes(buf.getvalue())


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    run = _write_tables(tmp_path_factory.mktemp("run"))
    (run / "metrics.json").write_text(json.dumps({"detector": {"concept_acc": 0.9}}))
    fit_head_main(["--run", str(run), "--heads", "ferl-compact,ferl-deep,cart,lr,lr-restricted"])
    return run


def test_files_of_a_run(run):
    assert (run / "calibration.json").is_file()
    for name in ("ferl-compact", "ferl-deep", "cart", "lr", "lr-restricted"):
        for inputs in ("raw", "calibrated"):
            folder = current_folder(run / "head" / name / inputs)
            model = {"model.skops"} if name == "cart" else {"model.json", "model.npz"}
            assert {p.name for p in folder.iterdir()} == {"head.json", "rules.md", *model}
    rules = (current_folder(run / "head" / "ferl-deep" / "calibrated") / "rules.md").read_text()
    assert "rules over" in rules and "has_part::" in rules and rules.startswith("<!-- inputs: calibrated")
    assert "alone = share of training samples" in rules  # the columns are defined where they are shown
    assert not list(run.rglob("*.tmp")) and not list(run.glob(".step-*"))
    doc = json.loads((run / "metrics.json").read_text())
    assert doc["detector"] == {"concept_acc": 0.9}  # other entries are kept
    entry = doc["fit_head"]
    assert entry["n"] == {"train": 160, "val": 120, "test": 120, "test_unseen_class_rows": 0}
    assert set(entry["heads"]["ferl-deep"]["raw"]) >= {"accuracy", "aurc", "ece", "coverage", "mean_set_size",
                                                       "abstention_rate", "u65", "u80", "size"}
    assert "coverage" not in entry["heads"]["lr"]["calibrated"]
    # the coverage-targeted sets (default 0.9, calibrated on val) beside the interval-dominance ones and
    # every head's split-conformal sets
    assert entry["coverage"] == 0.9
    deep = entry["heads"]["ferl-deep"]["calibrated"]
    assert {"paper_coverage", "paper_mean_set_size", "conformal_coverage"} <= set(deep)
    assert 0.0 < entry["heads"]["lr"]["calibrated"]["conformal_mean_set_size"] <= 4
    head = json.loads((current_folder(run / "head" / "ferl-deep" / "calibrated") / "head.json").read_text())
    assert head["coverage"] == 0.9
    table = (run / "tables" / "heads.md").read_text()
    assert "at 90 % target coverage" in table
    for row in ("FERL-compact", "FERL-deep", "CART", "| LR |", "Concept-restricted LR", "FERL credal sets",
                "BetP(c) = m({c}) + m(Θ)/C"):  # the last: why an accurate FERL head can show a large ECE
        assert row in table
    assert "Paper" not in table  # a synthetic run has no paper values
    csv = pd.read_csv(run / "tables" / "heads.csv")
    saved = csv[csv["train_concepts"] == "in-sample"]  # no cross-fitted table here
    assert len(saved) == 10 and set(saved["inputs"]) == {"raw", "calibrated"}
    assert len(csv[csv["train_concepts"] == "independent"]) == 10


def test_calibrated_concepts_have_lower_ece_on_val(run):
    val = load_concept_table(run / "concepts" / "val.npz")
    calibrator = ConceptCalibrator.load(run / "calibration.json")
    raw = concept_ece(val.probs, val.concept_labels)
    calibrated = concept_ece(calibrator.transform(val.probs, val.concept_names), val.concept_labels)
    assert np.all(calibrated <= raw + 1e-12) and calibrated.mean() < raw.mean() - 0.05
    summary = json.loads((run / "metrics.json").read_text())["fit_head"]["calibration"]["val"]
    assert summary["concept_ece_calibrated_mean"] == pytest.approx(calibrated.mean())


def test_saved_heads_reproduce_the_metrics(run):
    test = load_concept_table(run / "concepts" / "test.npz")
    calibrator = ConceptCalibrator.load(run / "calibration.json")
    entry = json.loads((run / "metrics.json").read_text())["fit_head"]
    y = np.asarray(test.class_names)[test.y]
    for name in ("ferl-deep", "lr-restricted"):
        for inputs, X in (("raw", test.probs), ("calibrated", calibrator.transform(test.probs))):
            head = load_head(run / "head" / name / inputs)
            assert evaluate_head(head, X, y, test.concept_names)["accuracy"] == pytest.approx(
                entry["heads"][name][inputs]["accuracy"])
    for inputs in ("raw", "calibrated"):
        deep = entry["heads"]["ferl-deep"][inputs]["size"]["concepts_used"]
        assert entry["heads"]["lr-restricted"][inputs]["size"]["concepts_used"] == deep


def test_same_seed_same_results_and_paper_values(tmp_path):
    src = _write_tables(tmp_path / "src", n_classes=20, scale=2)
    (src / "config.yaml").write_text("data:\n  dataset: cub\n  fold: null\n")
    entries = [fit_head(src / "concepts", tmp_path / f"out{i}", heads=["lr-restricted"], seed=1)
               for i in range(2)]
    for e in entries:
        for by_input in e["heads"].values():
            for m in by_input.values():
                m.pop("fit_seconds")
    assert entries[0] == entries[1] and list(entries[0]["heads"]) == ["ferl-deep", "lr-restricted"]
    assert entries[0]["paper_dataset"] == "cub20" and entries[0]["run_dataset"] == "cub"
    table = (tmp_path / "out0" / "tables" / "heads.md").read_text()
    assert "Paper raw (CUB-20)" in table and "77.67" in table and "86.28" in table


def test_unseen_test_classes_are_an_error_outside_open_world(tmp_path):
    run = _write_tables(tmp_path / "run")
    test = load_concept_table(run / "concepts" / "test.npz")
    y = test.y.copy()
    y[:7] = 4
    five = np.array([f"class_{c:03d}" for c in range(5)])
    _rewrite(run / "concepts" / "test.npz", y=y, class_names=five)
    for split in ("train", "val"):
        _rewrite(run / "concepts" / f"{split}.npz", class_names=five)
    with pytest.raises(ValueError, match=r"7 rows of 1 class\(es\) never seen in train: \['class_004'\]"):
        fit_head(run, run, heads=["lr"])
    (run / "config.yaml").write_text("data:\n  dataset: cub\n  fold: 2\n")  # an open-world fold
    entry = fit_head(run, run, heads=["lr"])
    assert entry["open_world"] and entry["n"]["test_unseen_class_rows"] == 7
    heads_md = (run / "tables" / "heads.md").read_text()
    assert "7 test rows of classes unseen in train" in heads_md
    n_train = len(set(load_concept_table(run / "concepts" / "train.npz").y.tolist()))
    assert n_train < 5 and f"{n_train} classes in training, 5 in the data set" in heads_md


@pytest.mark.parametrize(("split", "value"), [("val", np.nan), ("test", 1.2), ("train", -0.5)])
def test_bad_probabilities_name_split_row_and_concept(tmp_path, split, value):
    run = _write_tables(tmp_path / "run")
    path = run / "concepts" / f"{split}.npz"
    probs = load_concept_table(path).probs.copy()
    probs[3, 2] = value
    _rewrite(path, probs=probs)
    with pytest.raises(ValueError, match=rf"'{split}'.*row 3 .*concept 'has_part::2'"):
        fit_head(run, run, heads=["lr"])
    assert not (run / "calibration.json").exists()


@pytest.mark.parametrize(("split", "use"), [("train", "the heads are fitted"),
                                           ("val", "the calibrator and the sets are fitted"),
                                           ("test", "the heads are evaluated")])
def test_an_empty_split_is_named_with_its_file(tmp_path, split, use):
    # were "the test split has 120 rows of 4 class(es) never seen in train", "calibration probs has
    # no rows" and "probs to calibrate has no rows"
    run = _write_tables(tmp_path / "run")
    path = run / "concepts" / f"{split}.npz"
    table = load_concept_table(path)
    _rewrite(path, probs=table.probs[:0], concept_labels=table.concept_labels[:0], y=table.y[:0],
             sample_ids=table.sample_ids[:0])
    with pytest.raises(SystemExit, match=rf"concepts/{split}.npz of .*run has no rows: {use} on the {split} "
                                         rf"split; give the {split} split samples"):
        fit_head_main(["--run", str(run), "--heads", "lr"])
    assert not (run / "calibration.json").exists()


def test_concept_names_differing_between_tables_raise(tmp_path):
    run = _write_tables(tmp_path / "run")
    _rewrite(run / "concepts" / "test.npz", concept_names=np.array(CONCEPTS[:-1] + ["has_part::x"]))
    with pytest.raises(SystemExit, match="has_part::x"):
        fit_head_main(["--run", str(run), "--heads", "lr"])


def test_cli_argument_errors(tmp_path):
    with pytest.raises(SystemExit, match="exactly one of --run"):
        fit_head_main([])
    with pytest.raises(SystemExit, match="--concepts needs --out"):
        fit_head_main(["--concepts", str(tmp_path)])
    with pytest.raises(SystemExit, match="known heads"):
        fit_head_main(["--run", str(_write_tables(tmp_path / "run")), "--heads", "ferl-huge"])
    with pytest.raises(SystemExit, match="nowhere is not a folder"):
        fit_head_main(["--run", str(tmp_path / "nowhere")])


def test_unknown_ferl_settings_stop_before_anything_is_written(tmp_path):
    run = _write_tables(tmp_path / "run")
    with pytest.raises(ValueError, match="ferl_settings must be one of"):
        fit_head(run, run, heads=["ferl-deep"], ferl_settings="tabular")
    with pytest.raises(ValueError, match=r"seed must be an integer in \[0, 2\*\*32 - 1\], got -1"):
        fit_head(run, run, heads=["lr"], seed=-1)  # it failed late, in the first FERL head's fit
    assert not (run / "head").exists() and not (run / "calibration.json").exists()


def test_default_config_parses():
    config = Path(__file__).resolve().parents[3] / "configs" / "head" / "default.yaml"
    cfg = fit_head_parser().parse_args(["--config", str(config), "--run", "r", "--heads", "lr,cart"])
    assert cfg.heads == "lr,cart" and cfg.seed == 0 and cfg.dataset == "auto" and cfg.open_world is None
    cfg = fit_head_parser().parse_args(["--config", str(config), "--run", "r"])
    assert cfg.heads == ["ferl-compact", "ferl-medium", "ferl-deep", "cart", "cart-compact", "lr",
                         "lr-restricted"]
    assert cfg.ferl_settings == "concepts"


# ----------------------------------------------------------------------------- robustness
def _snapshot(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*"))
            if p.is_file() and p.name != ".lock"}


@pytest.mark.parametrize("metrics, match", [
    ("[1, 2]", "holds a JSON list, not an object"), ("{oops", "exists but is not valid JSON"),
])
def test_an_unusable_metrics_json_stops_before_anything_is_written(tmp_path, metrics, match):
    run = _write_tables(tmp_path / "run")
    (run / "metrics.json").write_text(metrics)
    before = _snapshot(run)
    with pytest.raises(SystemExit, match=rf"^fit-head: error: .*metrics.json {match}") as info:
        fit_head_main(["--run", str(run), "--heads", "lr"])
    assert "\n" not in str(info.value.code)
    assert _snapshot(run) == before and not (run / "head").exists()


def test_a_corrupt_config_yaml_is_one_error_line(tmp_path):
    run = _write_tables(tmp_path / "run")
    (run / "config.yaml").write_text("data: [unclosed\n  dataset: cub\n")
    with pytest.raises(SystemExit, match=r"^fit-head: error: .*config.yaml is not valid YAML") as info:
        fit_head_main(["--run", str(run), "--heads", "lr"])
    assert "\n" not in str(info.value.code) and not (run / "head").exists()


def test_a_read_only_out_is_one_error_line(tmp_path, monkeypatch):
    run = _write_tables(tmp_path / "run")
    out = tmp_path / "out"
    out.mkdir()
    real = os.open

    def read_only(path, *args, **kwargs):  # as a read-only folder answers, even to root
        if Path(path).parent == out:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only)
    with pytest.raises(SystemExit, match=r"^fit-head: error: \[Errno 13\] Permission denied: .*out/\.lock"):
        fit_head_main(["--concepts", str(run / "concepts"), "--out", str(out), "--heads", "lr"])


def test_a_second_fit_head_on_one_folder_is_refused(tmp_path, child):
    run = _write_tables(tmp_path / "run")
    fit_head(run, run, heads=["lr"], seed=0)
    before = _snapshot(run)
    with child.holding_lock(run):
        with pytest.raises(SystemExit, match=r"^fit-head: error: .*run is being written by another process"):
            fit_head_main(["--run", str(run), "--heads", "lr", "--seed", "1"])
    assert _snapshot(run) == before


def _seeds(run: Path) -> set[int]:
    """The seeds of every result of the run's fit-head step (one value when they belong together)."""
    with folder_lock(run):  # the next writer finishes a step a kill interrupted after its commit
        pass
    entry = json.loads((run / "metrics.json").read_text())["fit_head"]
    seeds = {entry["seed"]} | {load_head(run / "head" / "lr" / i).seed for i in ("raw", "calibrated")}
    return seeds


def test_a_kill_at_any_step_of_fit_head_leaves_one_whole_step(tmp_path, child, monkeypatch):
    run = _write_tables(tmp_path / "run")
    fit_head(run, run, heads=["lr"], seed=0)
    steps = child.count_steps(monkeypatch, lambda: fit_head(run, run, heads=["lr"], seed=1))
    fit_head(run, run, heads=["lr"], seed=0)
    killed = 0
    for i, k in enumerate(range(1, steps + 1, 10)):  # a file-system step in every stretch of 10
        status = child.run(lambda s=i + 1: fit_head(run, run, heads=["lr"], seed=s), kill_at=k)
        killed += os.WIFSIGNALED(status)
        assert len(_seeds(run)) == 1, f"a kill at step {k} of {steps} mixed two fit-head steps"
    assert killed >= 7 and not list(run.glob(".step-*"))


def test_sigterm_while_fitting_exits_143_saying_nothing_changed(tmp_path, child, monkeypatch):
    run = _write_tables(tmp_path / "run")
    fit_head(run, run, heads=["lr"], seed=0)
    before = _snapshot(run)
    real = fit_mod.make_head

    def make_head(*args, **kwargs):  # the signal arrives while the heads are being fitted
        os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **kwargs)

    monkeypatch.setattr(fit_mod, "make_head", make_head)
    err = tmp_path / "stderr"
    status = child.run(lambda: fit_head_main(["--run", str(run), "--heads", "lr", "--seed", "1"]), stderr=err)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 128 + signal.SIGTERM
    lines = err.read_text().strip().splitlines()
    assert lines[-1].startswith("fit-head: error: interrupted by SIGTERM while fitting the calibrator and "
                                f"the heads; {run} is unchanged")
    assert _snapshot(run) == before


def test_a_full_disk_while_writing_is_one_error_line_and_keeps_the_previous_step(tmp_path, monkeypatch):
    run = _write_tables(tmp_path / "run")
    fit_head(run, run, heads=["lr"], seed=0)
    before = _snapshot(run)
    real, calls = os.fsync, []

    def fsync(fd):
        calls.append(fd)
        if len(calls) == 6:  # a file in the middle of the new step
            raise OSError(28, "No space left on device")
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(SystemExit, match=r"^fit-head: error: \[Errno 28\] No space left on device$"):
        fit_head_main(["--run", str(run), "--heads", "lr", "--seed", "1"])
    monkeypatch.undo()
    assert _snapshot(run) == before and _seeds(run) == {0}
    assert all(len(list((run / "head" / "lr" / i).glob("v-*"))) == 1 for i in INPUTS)  # no debris


@pytest.mark.parametrize("ferl_settings", ["learner", "concepts"])
def test_cart_compact_has_compact_size_and_the_table_says_what_its_rules_cannot_name(tmp_path, ferl_settings):
    src = _write_tables(tmp_path / "src", n_classes=20, scale=2)
    entry = fit_head(src / "concepts", tmp_path / "out", heads=["cart-compact"], seed=0,
                     compare_train_concepts=False, ferl_settings=ferl_settings)
    assert list(entry["heads"]) == ["ferl-compact", "cart-compact"]  # compact is fitted to size the CART
    for inputs in INPUTS:
        rules = entry["heads"]["ferl-compact"][inputs]["size"]["rules"]
        assert 2 <= rules < 20 and entry["heads"]["cart-compact"][inputs]["size"]["rules"] == rules
    table = (tmp_path / "out" / "tables" / "heads.md").read_text()
    assert "| CART (compact's size) |" in table
    most = max(entry["heads"]["ferl-compact"][i]["size"]["rules"] for i in INPUTS)
    # the paper's tree evidence can only conclude a class a rule names; learned weights read every concept
    named = f"{most} rules cannot name 20 classes" in table
    assert named == (ferl_settings == "learner")
    assert ("its rules need not name every class" in table) == (ferl_settings == "concepts")
    saved = load_head(tmp_path / "out" / "head" / "cart-compact" / "raw")  # loads without the size option
    assert saved.size()["rules"] == entry["heads"]["ferl-compact"]["raw"]["size"]["rules"]


def test_a_coverage_the_val_split_cannot_certify_is_said(tmp_path):
    """--coverage 0.9999 with a few val rows exited silently with every set holding every class."""
    run = _write_tables(tmp_path)
    n_val = int(np.load(run / "concepts" / "val.npz")["y"].size)
    with pytest.warns(UserWarning, match=rf"--coverage 0.9999 cannot be certified by the {n_val} val rows.*"
                                         rf"at most {n_val / (n_val + 1):.4g}.*at least 9999 rows"):
        fit_head(run, run, heads=["ferl-deep"], coverage=0.9999, compare_train_concepts=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        fit_head(run, run, heads=["ferl-deep"], coverage=0.9, compare_train_concepts=False)


def test_one_abstention_line_per_run_not_one_warning_per_head(tmp_path, caplog):
    """fit-head printed the learner's held-out abstention warning once per FERL head (eight in the
    demo) about a discount point the product does not read; now one summary line names every head."""
    run = _write_tables(tmp_path, n_classes=6)
    with warnings.catch_warnings(record=True) as caught, caplog.at_level("INFO", logger="cbm.heads.fit"):
        warnings.simplefilter("always")
        fit_head(run, run, heads=["ferl-compact", "ferl-medium", "ferl-deep"], compare_train_concepts=False)
    assert not [w for w in caught if "abstain even where the discount" in str(w.message)]
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("abstention on calibrated")]
    assert len(lines) == 1
    rates = json.loads((run / "metrics.json").read_text())["fit_head"]["heads"]
    for name in ("ferl-compact", "ferl-medium", "ferl-deep"):
        assert f"{name} {100 * rates[name]['calibrated']['abstention_rate']:.1f} %" in lines[0]
