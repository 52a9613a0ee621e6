"""The demo driver and the run report: a tiny real demo run, the example choice, safe re-runs."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

import cbm.report
from cbm.demo import TINY, fingerprint, headline, prepare_run_dir, run_demo, step_commands
from cbm.report.build import build_report, demote_headings
from cbm.report.examples import pick_examples
from cbm.report.plots import concept_accuracy_figure, heads_figure, tree_figure
from cbm.report.run import load_run

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A real demo run with the tiny profile (every console script, in process)."""
    out = tmp_path_factory.mktemp("demo") / "run"
    report = run_demo(out, TINY, say=lambda _: None)
    assert report == out / "report.md"
    return out


def test_tiny_demo_report_has_every_section(tiny):
    text = (tiny / "report.md").read_text()
    for heading in ("## Concept detector", "## Heads on raw vs calibrated concepts",
                    "## Open-world evaluation", "## Concept interventions",
                    "### Test accuracy (%) after k answered groups",
                    "## Example explanations", "### A confident prediction",
                    "### A two-class credal set",
                    "### A held-out-class image (an abstention where there is one)",
                    "## Rules of FERL-deep"):
        assert heading in text
    det = json.loads((tiny / "detector" / "metrics.json").read_text())["splits"]
    for split, m in det.items():  # concept accuracy of every exported split, as trained
        assert f"| {split} | {m['n']} | {100 * m['concept_acc']:.2f} |" in text
    heads = json.loads((tiny / "metrics.json").read_text())["fit_head"]["heads"]
    raw, cal = (100 * heads["ferl-deep"][i]["accuracy"] for i in ("raw", "calibrated"))
    assert f"| FERL-deep | {raw:.2f} | {cal:.2f} |" in text
    assert "| FERL-deep (residual) |" in text and "| kNN (k=5) |" in text  # the open-world table
    assert "train-detector --config configs/detector/synthetic.yaml" in text
    assert "Prediction:" in text and "**Anomalous attributes**" in text
    # the examples show the score predict flags with (fit-head's FERL-deep: its joint score)
    assert text.count("joint OOD score ") >= 2 * text.count("Prediction:")  # explanation and threshold
    assert not re.search(r"\b(typical|leaf|nll|combined) OOD score [-\d]", text)
    assert ("credal set holds exactly two classes" in text) != ("no such example to show" in text)
    # the examples' sets are the operating point's, and the report says so (not interval dominance)
    assert "the credal set is the run's operating point's" in text and "the largest belief" not in text
    assert "was never seen in training; its nearest training class is" in text
    # every example says how reliable its evidence is at the operating point: r(x) in (0, 1]
    reliable = re.findall(r"The evidence's reliability at the operating point: r\(x\) = ([0-9.]+)", text)
    assert len(reliable) == text.count("Prediction:")
    assert all(0 < float(r) <= 1 for r in reliable)
    assert "| FERL-deep (ignorance-discounted) |" in text
    hits = re.search(r"anomalous attributes, (\d+) (is|are) among these", text)
    assert hits and (hits[2] == "is") == (hits[1] == "1")  # "1 is", "0 are", "2 are"
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    # the interventions table: one row per head and fit, its best policy at k = 3, the gain columns
    assert "| FERL-deep (independent) | `" in text and "| gain (pts) | k for 95 % of the gain |" in text
    assert {"plots/concept_accuracy.png", "plots/heads.png", "plots/tree.png", "plots/openworld_roc.png",
            "interventions/interventions.png",
            "examples/confident.png", "examples/novel_evidence.png"} <= set(links)
    for link in links:
        assert (tiny / link).read_bytes()[:8] == PNG, link
    with Image.open(tiny / "examples" / "confident.png") as img:  # the synthetic image, enlarged 4x
        assert img.size == (256, 256)
    assert not list(tiny.rglob("*.tmp"))


def test_tiny_demo_state_and_headline(tiny):
    state = json.loads((tiny / "demo_state.json").read_text())
    assert state["complete"]
    assert state["done"] == ["detector", "heads", "openworld", "interventions", "shift", "report"]
    assert state["fingerprint"] == fingerprint(TINY)
    lines = headline(tiny)
    assert lines[0].startswith("concept accuracy: train ") and "ferl-deep test accuracy" in lines[1]
    # the head's own novelty score (the kind its threshold uses) and the best baseline, not every score
    frame = pd.read_csv(tiny / "openworld" / "per_fold.csv").groupby("detector")["auroc"].mean()
    base = frame[[d for d in frame.index if not d.startswith("ferl")]]
    label = pd.read_csv(tiny / "openworld" / "per_fold.csv").set_index("detector")["label"]
    own = 100 * frame["ferl-deep:joint"]  # fit-head's FERL-deep (learned weights) thresholds its joint score
    assert lines[2] == (f"open-world AUROC (held-out classes): FERL-deep (joint) {own:.1f}, "
                        f"{label[base.idxmax()]} {100 * base.max():.1f} (best baseline)")


def test_report_rebuild_removes_stale_example_images(tiny):
    stale = tiny / "examples" / "old-kind.png"
    stale.write_bytes(PNG)
    build_report(tiny, openworld=tiny / "openworld")
    assert not stale.exists() and (tiny / "examples" / "confident.png").is_file()
    text = (tiny / "report.md").read_text()
    assert text.startswith("# Run report: run")


def test_report_errors_name_the_problem(tmp_path, tiny):
    with pytest.raises(FileNotFoundError, match="not a run directory"):
        build_report(tmp_path)
    with pytest.raises(FileNotFoundError, match="no head 'ferl-compact'.*saved heads"):
        build_report(tiny, head="ferl-compact")
    with pytest.raises(ValueError, match="not a FERL head"):
        build_report(tiny, head="lr")
    copy = tmp_path / "run"  # was "pick_examples needs the test split's outputs"
    shutil.copytree(tiny, copy, ignore=shutil.ignore_patterns("test.npz"))
    with pytest.raises(FileNotFoundError, match=r"concepts/test.npz not found: the report's examples are "
                                                r"chosen from the run's test split; export it"):
        build_report(copy)


def test_demote_headings():
    assert demote_headings("# A\ntext # not\n## B\n") == "## A\ntext # not\n### B\n"


# ----------------------------------------------------------------------------- picking examples
def _outputs(sets, proba, y, ood=None, ignorance=None):
    sets, proba = np.asarray(sets, dtype=bool), np.asarray(proba, dtype=float)
    n = len(sets)
    return {"sets": sets, "proba": proba, "y": np.asarray(y),
            "ood": np.zeros(n) if ood is None else np.asarray(ood),
            "ignorance": np.zeros(n) if ignorance is None else np.asarray(ignorance)}


def test_pick_examples_chooses_by_evidential_outputs():
    test = _outputs(
        sets=[[1, 0, 0], [1, 0, 0], [0, 1, 1], [1, 1, 0], [0, 1, 0], [1, 1, 0]],
        proba=[[.9, .05, .05], [.95, .05, 0], [0, .6, .4], [.5, .5, 0], [.01, .99, 0], [.55, .45, 0]],
        y=[0, 0, 0, 1, 0, 2])
    novel = _outputs(sets=[[1, 1, 1], [1, 0, 0], [1, 1, 1]], proba=np.full((3, 3), 1 / 3), y=[-1, -1, -1],
                     ood=[2.0, 9.0, 5.0])
    picks = pick_examples({"test": test, "novel": novel})
    # row 4 is more confident but wrong; row 1 is the most confident correct singleton
    assert picks["confident"][1].row == 1 and picks["confident"][1].split == "test"
    # rows 2, 3, 5 hold two classes; the true class is outside row 2's and row 5's set
    assert picks["two-class"] == ("main", picks["two-class"][1]) and picks["two-class"][1].row == 3
    # abstaining novel rows 0 and 2: the higher OOD score wins over the non-abstaining row 1
    assert picks["novel"][1].split == "novel" and picks["novel"][1].row == 2
    assert "abstains" in picks["novel"][1].reason


def test_pick_examples_fallbacks_and_absence():
    test = _outputs(sets=[[1, 0], [0, 1]], proba=[[.8, .2], [.3, .7]], y=[0, 0], ood=[1.0, 3.0])
    other = {"test": _outputs(sets=[[1, 0], [1, 1]], proba=[[1, 0], [.5, .5]], y=[0, 0])}
    picks = pick_examples({"test": test}, extra_two_class=[("ferl-medium", other)])
    assert picks["two-class"][0] == "ferl-medium" and picks["two-class"][1].row == 1
    # no novel split: the test row with the highest OOD score
    assert picks["novel"][1].split == "test" and picks["novel"][1].row == 1
    none = pick_examples({"test": test})
    assert none["two-class"] is None
    wrong = _outputs(sets=[[0, 1]], proba=[[.2, .8]], y=[0])
    assert pick_examples({"test": wrong})["confident"] is None
    with pytest.raises(ValueError, match="inconsistent lengths"):
        pick_examples({"test": {**test, "ood": np.zeros(3)}})
    with pytest.raises(ValueError, match="test split"):
        pick_examples({"novel": test})


# ----------------------------------------------------------------------------- safe re-runs
def test_prepare_run_dir_resumes_replaces_or_keeps_previous(tmp_path):
    out = tmp_path / "demo"
    state = prepare_run_dir(out, "fp1", say=lambda _: None)
    assert state == {"fingerprint": "fp1", "done": [], "seconds": {}, "complete": False}
    (out / "partial.txt").write_text("x")
    state["done"] = ["detector"]
    (out / "demo_state.json").write_text(json.dumps(state))
    assert prepare_run_dir(out, "fp1", say=lambda _: None)["done"] == ["detector"]  # same config: resumed
    assert (out / "partial.txt").is_file()
    assert prepare_run_dir(out, "fp2", say=lambda _: None)["done"] == []  # other config: replaced
    assert not (out / "partial.txt").exists()
    (out / "partial.txt").write_text("x")
    prepare_run_dir(out, "fp2", fresh=True, say=lambda _: None)
    assert not (out / "partial.txt").exists()
    (out / "report.md").write_text("finished")
    (out / "demo_state.json").write_text(json.dumps({"fingerprint": "fp2", "done": [], "complete": True}))
    prepare_run_dir(out, "fp2", say=lambda _: None)  # a finished run is kept aside, not mixed in
    assert (tmp_path / "demo.previous" / "report.md").read_text() == "finished"
    assert [p.name for p in out.iterdir()] == ["demo_state.json"]
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "data.csv").write_text("1")
    with pytest.raises(FileExistsError, match="not made by the demo"):
        prepare_run_dir(foreign, "fp1", say=lambda _: None)


def test_interrupted_demo_resumes_from_the_last_checkpoint(tmp_path, monkeypatch):
    out = tmp_path / "demo"
    calls: list[tuple[str, list[str]]] = []
    interrupt = {"train-detector"}

    def runner(script, argv):
        calls.append((script, list(argv)))
        if script == "train-detector":
            ckpt = out / "detector" / "checkpoints" / "last.ckpt"
            ckpt.parent.mkdir(parents=True, exist_ok=True)
            ckpt.write_bytes(b"epoch 1")
        if script in interrupt:
            interrupt.discard(script)
            raise KeyboardInterrupt

    def fake_report(run_dir, **kwargs):
        path = Path(run_dir, "report.md")
        path.write_text("report")
        return path

    monkeypatch.setattr(cbm.report, "build_report", fake_report)
    quiet = {"runner": runner, "say": lambda _: None}
    with pytest.raises(KeyboardInterrupt):
        run_demo(out, TINY, **quiet)
    assert json.loads((out / "demo_state.json").read_text())["done"] == []
    interrupt.add("evaluate-openworld")
    with pytest.raises(KeyboardInterrupt):
        run_demo(out, TINY, **quiet)
    assert calls[1][0] == "train-detector" and calls[1][1][-2:] == ["--ckpt-path", "last"]
    assert json.loads((out / "demo_state.json").read_text())["done"] == ["detector", "heads"]
    run_demo(out, TINY, **quiet)  # only the open-world, intervention and shift steps and the report are left
    assert [c[0] for c in calls] == ["train-detector", "train-detector", "fit-head", "evaluate-openworld",
                                     "evaluate-openworld", "evaluate-interventions", "evaluate-shift"]
    assert json.loads((out / "demo_state.json").read_text())["complete"]
    calls.clear()
    run_demo(out, TINY, **quiet)  # a second run after a finished one starts afresh
    assert calls[0][0] == "train-detector" and "--ckpt-path" not in calls[0][1]
    assert not (tmp_path / "demo.previous").exists()  # removed once the new run finished


def test_figures_draw_the_run_values(tiny):
    run = load_run(tiny)
    fig = concept_accuracy_figure(run.tables)
    heights = np.array([p.get_height() for p in fig.axes[0].patches]).reshape(2, -1)
    for row, split in zip(heights, ("test", "novel"), strict=True):
        t = run.tables[split]
        expected = 100 * ((t.probs > 0.5) == t.concept_labels.astype(bool)).mean(axis=0)
        np.testing.assert_allclose(row, expected)
    with pytest.raises(ValueError, match="none of the splits"):
        concept_accuracy_figure({"train": run.tables["train"]})
    entry = run.metrics["fit_head"]
    bars = np.array([p.get_height() for p in heads_figure(entry).axes[0].patches]).reshape(2, -1)
    for row, inputs in zip(bars, ("raw", "calibrated"), strict=True):
        np.testing.assert_allclose(row, [100 * entry["heads"][h][inputs]["accuracy"] for h in entry["heads"]])
    clf = run.head("ferl-deep").model_
    leaves = [t for t in tree_figure(clf).axes[0].texts if t.get_text().startswith("rule ")]
    assert len(leaves) == clf.n_rules_
    # drawn to depth 2: every rule is a leaf box there or counted in a grey box (a readable figure)
    texts = [t.get_text() for t in tree_figure(clf, max_depth=2).axes[0].texts]
    counted = sum(int(t.split()[0]) for t in texts if t.endswith("rules\nbelow"))
    assert counted + sum(t.startswith("rule ") for t in texts) == clf.n_rules_ and counted > 0
    with pytest.raises(ValueError, match="max_depth"):
        tree_figure(clf, max_depth=0)


def test_report_and_openworld_report_show_the_curves(tiny):
    from cbm.report.curves import FIGURES

    text = (tiny / "report.md").read_text()
    for rel in FIGURES:  # training curves, risk-coverage, reliability, confusion matrix
        assert f"]({rel})" in text
        data = (tiny / rel).read_bytes()
        assert data[:8] == PNG and len(data) > 5000, rel
    assert "### Risk–coverage" in text and "### Reliability" in text and "### Confusion matrix" in text
    ow = (tiny / "openworld" / "report.md").read_text()
    for name in ("risk_coverage.png", "reliability.png", "training_curves.png", "confusion.png"):
        assert f"]({name})" in ow and f"](openworld/{name})" in text  # embedded in the run report too
        data = (tiny / "openworld" / name).read_bytes()
        assert data[:8] == PNG and len(data) > 5000, name


def test_demo_passes_threads_to_every_console_script(tmp_path):
    cmds = step_commands(tmp_path, TINY, threads=1)
    assert all(cmds[step][-2:] == ["--threads", "1"] for step in ("detector", "heads", "openworld"))
    assert "--threads" not in cmds["report"] and "--threads" not in step_commands(tmp_path, TINY)["heads"]


# ----------------------------------------------------------------------------- the first screen
def test_report_opens_with_the_summary_and_stays_short(tiny):
    """A summary table in the first 40 lines, the whole report at most 400 lines."""
    lines = (tiny / "report.md").read_text().splitlines()
    assert len(lines) <= 400
    top = "\n".join(lines[:40])
    assert "## Summary" in top and "| head | accuracy | ECE | coverage | set size | abstains |" in top
    heads = json.loads((tiny / "metrics.json").read_text())["fit_head"]["heads"]
    for name, label in (("ferl-deep", "**FERL-deep**"), ("ferl-medium", "FERL-medium"), ("lr", "LR")):
        m = heads[name]["calibrated"]
        assert f"| {label} | {100 * m['accuracy']:.1f} | {100 * m['ece']:.1f} |" in top
    lr_row = top.split("\n| LR | ")[1].split("\n")[0].split(" | ")
    assert lr_row[2:6] == ["–"] * 4  # LR has no credal sets: coverage, size, abstention, accepted accuracy
    frame = pd.read_csv(tiny / "openworld" / "per_fold.csv").groupby("detector")["auroc"].mean()
    assert f"FERL-deep (joint) AUROC **{100 * frame['ferl-deep:joint']:.1f}**" in top
    # the examples list the top classes, not all of them; the other FERL scores sit in the appendix
    assert "### FERL's other novelty scores" in "\n".join(lines)
    lead = "\n".join(lines).split("## Open-world evaluation")[1].split("##")[0]
    assert "FERL-deep (joint)" in lead and "FERL-deep (residual)" not in lead and "kNN (k=5)" in lead


def test_summary_numbers_recompute_from_the_saved_heads(tiny):
    from cbm.heads.operating import decide
    from cbm.report.summary import summary_numbers

    run = load_run(tiny)
    s = summary_numbers(run, "ferl-deep", "calibrated", tiny / "openworld")
    row = next(r for r in s.heads if r.name == "ferl-deep")
    head = run.head("ferl-deep")
    X, y = run.concepts("test"), run.tables["test"].y
    assert head.operating_ is not None  # fit-head fits the operating point every command reads
    dec = decide(head, X, run.tables["test"].feature_score)  # what predict answers on these rows
    keep = ~dec.abstained
    right = head.predict(X) == np.asarray(run.class_names)[y]
    assert row.abstention == pytest.approx(1 - keep.mean())
    assert row.accepted_accuracy == (pytest.approx(right[keep].mean()) if keep.any() else None)
    assert row.set_size == pytest.approx(dec.sets[keep].sum(axis=1).mean())
    idx = head.class_index(np.asarray(run.class_names)[y])
    assert row.coverage == pytest.approx(dec.sets[np.arange(len(y)), idx].mean())
    curves = pd.read_csv(tiny / "interventions" / "curves.csv")
    seq = curves[(curves["head"] == "ferl-deep") & (curves["fit"] == "sequential")
                 & (curves["split"] == "test")]
    best = seq[seq["k"] == 3].groupby("policy")["accuracy"].mean()
    assert row.intervened[1] == pytest.approx(best.max())
    assert row.intervened[2] in best[best == best.max()].index  # any of the tied best policies
    lr = next(r for r in s.heads if r.name == "lr")
    assert lr.coverage is None and lr.accepted_accuracy is None


def test_short_explanation_lists_the_top_classes_and_the_true_one(tiny):
    from cbm.report.explanation import short_markdown

    run = load_run(tiny)
    head = run.head("ferl-deep")
    ex = head.model_.explain(run.concepts("test")[0])
    order = np.argsort(-np.asarray(ex.probability), kind="stable")
    last = str(ex.classes[order[-1]])
    text = short_markdown(ex, top=2, truth=last)
    rows = [line for line in text.splitlines() if line.startswith("| ") and "BetP" not in line]
    named = [r.split(" | ")[0][2:] for r in rows[:3]]
    assert named == [str(ex.classes[order[0]]), str(ex.classes[order[1]]), f"{last} (true)"]
    assert f"{len(ex.classes) - 3} other classes" in text
    assert ("certified radius" in text) == (ex.robustness_radius > 0)
    with pytest.raises(ValueError, match="top must be a positive integer"):
        short_markdown(ex, top=0)


def test_report_gives_the_sufficient_rules_count_over_the_test_split(tiny):
    """The explanations list the sufficient rules; the report says how many over the test split."""
    from ferl.evidence.sufficiency import sufficient_rule_counts

    run = load_run(tiny)
    model = run.head("ferl-deep", "calibrated").model_
    counts = sufficient_rule_counts(model, run.concepts("test", "calibrated"))
    text = (tiny / "report.md").read_text()
    assert (f"Over the {counts.size} test images: median {np.median(counts):g}, 90th percentile "
            f"{np.quantile(counts, 0.9):g}, at most 10 rules for {100 * np.mean(counts <= 10):.1f} %") in text
    zero, one = 100 * np.mean(counts == 0), 100 * np.mean(counts == 1)
    assert f"images by the number of sufficient rules: 0: {zero:.1f} %, 1: {one:.1f} %, " in text
    assert "**Sufficient rules**: with the prior they alone reach 90 % of the margin" in text


def test_the_report_gives_the_certified_radius_over_the_test_split(tiny):
    from cbm.heads.operating import certified_radius

    run = load_run(tiny)
    radius = certified_radius(run.head("ferl-deep"), run.concepts("test"))
    text = (tiny / "report.md").read_text()
    section = text.split("## Certified robustness")[1].split("\n## ")[0]
    assert "in calibrated concept probabilities" in section
    positive = radius[radius > 0]
    assert positive.size  # the tiny run's FERL-deep certifies some test images
    q = np.quantile(radius, [0.25, 0.5, 0.75], method="lower")
    row = (f"Over the {radius.size} test images: radius > 0 for {100 * positive.size / radius.size:.1f} %, "
           f"quartiles 25 / 50 / 75 % {q[0]:.3g} / {q[1]:.3g} / {q[2]:.3g}, median of those > 0 "
           f"{np.quantile(positive, 0.5, method='lower'):.3g}.")
    assert row in section


def test_the_radius_summary_counts_zeros_and_infinite_radii():
    from cbm.report.robustness import radius_summary

    s = radius_summary(np.array([0.0, 0.0, 0.1, 0.3, np.inf]))
    assert s.n == 5 and s.certified == pytest.approx(0.6)
    assert s.quartiles == (0.0, 0.1, 0.3) and s.certified_median == 0.3
    assert radius_summary(np.zeros(3)).certified_median is None
    for bad in (np.array([]), np.array([0.1, np.nan]), np.array([-0.1]), np.zeros((2, 2))):
        with pytest.raises(ValueError, match="radii must be a non-empty 1-d array of numbers >= 0"):
            radius_summary(bad)


def test_the_report_shows_the_runs_shift_table(tiny):
    """Each cell of the shift section is the shift table's coverage / answered right / set size."""
    from cbm.shift.report import METHOD_LABELS, shift_summary

    frame = pd.read_csv(tiny / "shift" / "shift.csv")
    parts = [shift_summary(frame, m).loc["product"] for m in ("coverage", "answered_right", "set_size")]
    cells = " | ".join(f"{100 * c:.1f} / {100 * r:.1f} / {s:.2f}" for c, r, s in zip(*parts, strict=True))
    report = build_report(tiny, shift=tiny / "shift")  # other tests rebuild it without the shift folder
    section = report.read_text().split("## Coverage under shift")[1].split("\n## ")[0]
    assert f"| {METHOD_LABELS['product']} | {cells} |" in section
