"""Figures of heads' outputs and detector logs: risk-coverage, reliability, confusion, training curves."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from cbm.detector.curves import read_training_log, training_curves_figure
from cbm.heads.curves import confusion_figure, reliability_bins, reliability_figure, risk_coverage_figure
from ferl.metrics import expected_calibration_error


def test_risk_coverage_draws_selective_accuracy_averaged_over_runs():
    y = np.array([0, 0, 0, 0])
    pred = np.array([0, 0, 1, 1])  # two errors
    good = np.array([4.0, 3.0, 2.0, 1.0])  # errors ranked last
    bad = -good
    fig = risk_coverage_figure({"good": [(y, pred, good)], "mixed": [(y, pred, good), (y, pred, bad)]},
                               n_grid=5)
    lines = {ln.get_label().split(" (")[0]: ln for ln in fig.axes[0].get_lines()}
    np.testing.assert_allclose(lines["good"].get_xdata(), [0, 25, 50, 75, 100])
    np.testing.assert_allclose(lines["good"].get_ydata(), [100, 100, 100, 200 / 3, 50])
    # the bad ranking accepts both errors first: accuracy 0, 0, 1/3, 1/2 -> mean with good
    np.testing.assert_allclose(lines["mixed"].get_ydata(), [50, 50, 50, 50, 50])
    assert "AURC 20.8" in lines["good"].get_label()  # risks 0, 0, 1/3, 1/2 -> mean 20.8 %
    with pytest.raises(ValueError, match="no risk-coverage curves"):
        risk_coverage_figure({})


def test_reliability_bins_match_the_ece_of_ferl_metrics():
    rng = np.random.default_rng(0)
    proba = rng.dirichlet(np.ones(3), size=200)
    y = rng.integers(0, 3, size=200)
    conf, correct = proba.max(axis=1), proba.argmax(axis=1) == y
    x, rate, count, ece = reliability_bins(conf, correct, 15)
    assert ece == pytest.approx(expected_calibration_error(y, proba, 15))
    assert count.sum() == 200 and ((x >= 0) & (x <= 1)).all() and ((rate >= 0) & (rate <= 1)).all()
    x, rate, count, ece = reliability_bins(np.array([0.1, 0.1, 0.9, 0.95]), np.array([0, 1, 1, 1]), 10)
    np.testing.assert_allclose(x, [0.1, 0.925])
    np.testing.assert_allclose(rate, [0.5, 1.0])
    assert count.tolist() == [2, 2] and ece == pytest.approx((2 * 0.4 + 2 * 0.075) / 4)
    fig = reliability_figure({"head": {"raw": (conf, correct), "calibrated": (conf, correct)}})
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend[0].startswith("raw (ECE") and legend[1].startswith("calibrated (ECE")
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        reliability_bins(np.array([1.5]), np.array([1]))


def test_confusion_counts_abstentions_apart_and_rows_of_unseen_classes():
    abstained = np.array([False, False, True, False])
    fig = confusion_figure(["a", "a", "b", "new"], ["a", "b", "b", "a"], abstained,
                           ["a", "b", "new"], ["a", "b"])
    share = fig.axes[0].images[0].get_array()
    np.testing.assert_allclose(share, [[0.5, 0.5, 0], [0, 0, 1], [1, 0, 0]])
    counts = sorted((int(t.get_text()), t.get_position()) for t in fig.axes[0].texts)
    assert counts == [(1, (0, 0)), (1, (0, 2)), (1, (1, 0)), (1, (2, 1))]
    with pytest.raises(ValueError, match="labels missing .*\\['c'\\]"):
        confusion_figure(["c"], ["a"], np.array([False]), ["a"], ["a"])


def test_training_log_merges_sessions_per_epoch(tmp_path):
    logs = tmp_path / "detector" / "logs"
    for version, rows in (("version_0", [(0, 0.9, None), (0, None, 0.8), (1, None, 0.6)]),
                          ("version_1", [(1, None, 0.5), (2, None, 0.4)])):  # a resumed session
        (logs / version).mkdir(parents=True)
        pd.DataFrame(rows, columns=["epoch", "train/loss_epoch", "val/loss"]).to_csv(
            logs / version / "metrics.csv", index=False)
    log = read_training_log(tmp_path)
    assert log.index.tolist() == [0, 1, 2]
    assert log["val/loss"].tolist() == [0.8, 0.5, 0.4] and log["train/loss_epoch"].iloc[0] == 0.9
    fig = training_curves_figure({"run": log})
    assert [ln.get_label() for ln in fig.axes[0].get_lines()] == ["train loss", "val loss"]
    with pytest.raises(FileNotFoundError, match="no detector CSV logs"):
        read_training_log(tmp_path / "elsewhere")
