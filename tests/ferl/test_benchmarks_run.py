"""Smoke run of the benchmark protocol, its report and the thin script on two small data sets."""

from __future__ import annotations

import runpy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_iris, load_wine

from ferl.benchmarks.methods import ferl_available
from ferl.benchmarks.report import render_report, write_report
from ferl.benchmarks.runner import BenchmarkConfig, BenchmarkResult, run_benchmark

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_tabular.py"
METHODS = ["cart", "lr", "mlp-conformal"] + (["ferl-deep"] if ferl_available() else [])


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    """wine and iris (scikit-learn's bundled copies) written as KEEL-style files."""
    root = tmp_path_factory.mktemp("keel")
    for name, loader in (("wine", load_wine), ("iris", load_iris)):
        X, y = loader(return_X_y=True)
        lines = [", ".join([*(f"{v:g}" for v in row), f"c{k}"]) for row, k in zip(X, y, strict=True)]
        (root / f"{name}.dat").write_text("\n".join(lines) + "\n")
    return root


@pytest.fixture(scope="module")
def result(data_root) -> BenchmarkResult:
    config = BenchmarkConfig(data_root, ["wine", "iris"], folds=2, seed=0, methods=METHODS,
                             progress=False, refit_cci=False)
    return run_benchmark(config)


def test_no_progress_bar_is_drawn_into_a_log(data_root, capsys):
    config = BenchmarkConfig(data_root, ["iris"], folds=2, seed=0, methods=["cart"], progress=True,
                             refit_cci=False)
    assert len(run_benchmark(config).main) == 2
    assert "datasets x folds" not in capsys.readouterr().err  # pytest's stderr is not a terminal


def test_main_rows_are_complete_and_plausible(result):
    main = result.main
    assert len(main) == 2 * 2 * len(METHODS)
    acc = main.groupby(["dataset", "method"]).accuracy.mean()
    assert acc["wine", "cart"] > 0.8 and acc["iris", "cart"] > 0.85
    assert acc["wine", "lr"] > 0.9
    mlp = main[main.method == "mlp-conformal"]
    assert mlp.coverage.mean() >= 0.85 and (mlp.set_size >= 1).all()
    assert main[main.method == "cart"].coverage.isna().all()  # point predictor: no sets
    assert (main.aurc.between(0, 100)).all() and (main.fit_time > 0).all()
    assert (main[main.method == "cart"]["size"] >= 3).all()
    assert set(result.datasets.name) == {"wine", "iris"}
    assert result.datasets.set_index("name").loc["wine", "d"] == 13


def test_ood_rows_for_multiclass_sets(result):
    ood = result.ood
    assert set(ood.dataset) == {"wine", "iris"}
    knn = ood[ood.detector == "knn"]
    assert len(knn) == 2 * 2 * 3  # data sets x folds x held-out classes
    assert knn.auroc.between(0, 1).all() and knn.auroc.mean() > 0.6


@pytest.mark.skipif(not ferl_available(), reason="FERL not importable yet")
def test_ferl_studies_ran(result):
    abl = result.ablations
    assert set(abl.study) == {"readout", "gate"}
    readout = abl[abl.study == "readout"].groupby("variant").ignorance.mean()
    assert readout["all-nodes/dempster"] <= readout["leaves/dempster"]
    gate = abl[abl.study == "gate"].groupby("variant").ignorance_auroc.mean()
    assert gate["on"] > 0.9  # off-support inputs raise ignorance when gated
    shift = result.shift
    assert set(shift.k) == {0.0, 0.25, 0.5, 1.0, 1.5, 2.0}
    at0 = shift[shift.k == 0].groupby("method").coverage.mean()
    assert (at0 >= 0.75).all()
    from ferl import FERLClassifier

    if hasattr(FERLClassifier, "ood_score"):  # novelty scores have landed
        residual = result.ood[result.ood.detector == "ferl-deep:residual"]
        assert len(residual) == 2 * 2 * 3 and residual.auroc.between(0, 1).all()
        firing = abl[abl.study == "gate"].groupby("variant").firing_auroc.mean()
        assert firing["on"] > 0.9 and firing["off"] < firing["on"]


def test_report_renders_and_files_are_written(result, tmp_path):
    text = render_report(result, "cmd")
    for title in ("Table 1", "Table 2", "Table 3", "Table 8", "Table 9", "Table 10",
                  "Appendix E", "Appendix F", "Targets"):
        assert title in text
    assert "| CART | yes |" in text and "79.80" in text  # paper's CART mean beside ours
    report = write_report(result, tmp_path / "out", "cmd")
    files = {p.name for p in report.parent.iterdir()}
    assert {"report.md", "folds_methods.csv", "accuracy_vs_size.png"} <= files
    assert not [f for f in files if f.endswith(".tmp")]
    assert report.stat().st_mode & 0o444 == 0o444  # readable by the group and others
    back = pd.read_csv(report.parent / "folds_methods.csv")
    np.testing.assert_allclose(back.accuracy, result.main.accuracy)


def test_script_runs_end_to_end(data_root, tmp_path):
    main = runpy.run_path(str(SCRIPT))["main"]
    out = tmp_path / "script"
    status = main(["--data-root", str(data_root), "--datasets", "iris", "--folds", "2",
                   "--methods", "cart", "--no-ood", "--out", str(out)])
    assert status == 0
    text = (out / "report.md").read_text()
    assert "1 data sets x 2 folds" in text and "CART" in text


def test_targets_table_marks_met_and_unmet():
    from ferl.benchmarks.tables import markdown_table, table_targets

    rows = [("ferl-deep", 0.85, 9.0), ("cart", 0.80, 12.0), ("lr", 0.87, 8.0)]
    main = pd.DataFrame([{"dataset": "d", "fold": 0, "method": m, "accuracy": a, "aurc": r,
                          "coverage": float("nan"), "set_size": float("nan")}
                         for m, a, r in rows])
    text = table_targets(main, pd.DataFrame())
    assert "| FERL-deep accuracy >= CART + 2 | 85.00 | 82.00 | yes |" in text
    assert "| FERL-deep accuracy >= LR - 1 | 85.00 | 86.00 | no |" in text
    assert "| FERL-deep AURC < CART's | 9.00 | 12.00 | yes |" in text
    assert "| best FERL-deep OOD AUROC >= kNN's | – | – | – |" in text
    assert markdown_table(pd.DataFrame({"a": [1], "b": ["x"]})) == "| a | b |\n|---|---|\n| 1 | x |\n"
    # a pipe in a header or cell is escaped: each row keeps as many cells as the rule has
    piped = markdown_table(pd.DataFrame({"|truth|": [1.5], "set": ["a|b"]}))
    assert piped == "| \\|truth\\| | set |\n|---|---|\n| 1.5 | a\\|b |\n"
