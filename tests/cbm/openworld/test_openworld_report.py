"""Open-world report pieces: seed averaging, the Table 5 layout with the paper's values, labels."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from cbm.openworld.report import PAPER_TABLE5, detector_label, lead_detectors, seed_summary, table5_markdown


def _frame() -> pd.DataFrame:
    rows = []
    for seed, base in ((0, 0.80), (1, 0.90)):
        for fold, shift in ((0, -0.05), (1, 0.05)):
            rows.append({"seed": seed, "fold": fold, "detector": "ferl-deep:residual", "auroc": base + shift,
                         "aupr_out": 0.5, "fpr95": 0.4, "reject": 0.3})
            rows.append({"seed": seed, "fold": fold, "detector": "knn", "auroc": 0.70, "aupr_out": 0.6,
                         "fpr95": 0.2, "reject": 0.1})
    return pd.DataFrame(rows)


def test_seed_summary_averages_folds_then_seeds():
    s = seed_summary(_frame(), "detector", ["auroc"]).set_index("detector")
    # fold means per seed: 0.80 and 0.90 -> mean 0.85, sample std 0.0707
    assert s.loc["ferl-deep:residual", "mean"] == pytest.approx(0.85)
    assert s.loc["ferl-deep:residual", "std"] == pytest.approx(np.std([0.8, 0.9], ddof=1))
    assert s.loc["knn", "std"] == pytest.approx(0.0)
    assert (s["n_seeds"] == 2).all() and (s["n_folds"] == 2).all()


def test_table5_bolds_the_best_and_prints_the_papers_values():
    s = seed_summary(_frame(), "detector", ["auroc", "aupr_out", "fpr95", "reject"])
    md = table5_markdown(s, "awa2")
    ferl = next(line for line in md.splitlines() if line.startswith("| FERL-deep (residual)"))
    knn = next(line for line in md.splitlines() if line.startswith("| kNN"))
    assert "**85.0 ± 7.1**" in ferl and "| 86.2 |" in ferl  # AUROC: ours best, paper beside
    assert "**60.0 ± 0.0**" in knn and "**20.0 ± 0.0**" in knn  # AUPR-Out higher, FPR95 lower is best
    assert f"| {PAPER_TABLE5['awa2']['knn']['auroc']:.1f} |" in knn
    assert "(paper)" not in table5_markdown(s, None)


def test_one_seed_has_no_std_and_labels_are_readable():
    s = seed_summary(_frame()[lambda f: f.seed == 0], "detector", ["auroc", "aupr_out", "fpr95", "reject"])
    table = table5_markdown(s, None)
    assert "| **80.0** |" in table and "±" not in table  # one seed: the mean alone (was "80.0 ± –")
    assert detector_label("ferl-deep:residual") == "FERL-deep (residual)"
    assert detector_label("mahalanobis") == "Mahalanobis"


def test_the_report_leads_with_each_heads_own_kind_and_the_baselines():
    detectors = ["ferl-deep:typical", "ferl-deep:residual", "ferl-deep:energy", "ferl-compact:typical",
                 "ferl-compact:leaf", "knn", "lr-energy"]
    results = [{"heads": {"ferl-deep": {"ood_kind": "energy"}, "ferl-compact": {"ood_kind": "typical"}}}]
    lead = lead_detectors(results, detectors)
    assert lead == ["ferl-deep:energy", "ferl-compact:typical", "knn", "lr-energy"]
    # results written before the heads recorded their kind: each head's first score
    older = lead_detectors([{"heads": {"ferl-deep": {}}}], detectors[:3] + ["knn"])
    assert older == ["ferl-deep:typical", "knn"]
