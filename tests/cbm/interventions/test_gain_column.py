"""The interventions table's gain columns: what full intervention buys, and how many
answered groups reach 95 % of it; a head that answers make worse is not rewarded."""

from __future__ import annotations

import pandas as pd
import pytest

from cbm.interventions.report import curves_markdown, k_for_gain


def _curve(acc):
    return pd.DataFrame({"k": range(len(acc)), "accuracy": acc})


def test_k_for_gain_counts_groups_to_most_of_the_gain():
    assert k_for_gain(_curve([0.50, 0.70, 0.79, 0.80])) == 2  # 0.79 >= 0.50 + 0.95 * 0.30
    assert k_for_gain(_curve([0.50, 0.70, 0.78, 0.80])) == 3
    assert k_for_gain(_curve([0.50, 0.70, 0.78, 0.80]), share=0.5) == 1
    assert k_for_gain(_curve([0.80, 0.90, 0.85, 0.90]).sample(frac=1, random_state=0)) == 1  # rows unsorted


def test_a_curve_that_answers_make_worse_has_no_gain():
    # "within 1 pt of full" said 2 here: the head reached its lower full-intervention value early
    assert k_for_gain(_curve([0.815, 0.756, 0.743, 0.746, 0.747])) is None
    assert k_for_gain(_curve([0.8, 0.8, 0.8])) is None
    with pytest.raises(ValueError, match="share"):
        k_for_gain(_curve([0.5, 0.6]), share=0.0)
    with pytest.raises(ValueError, match="empty"):
        k_for_gain(_curve([]))


def test_the_accuracy_table_shows_gain_and_groups_needed():
    rows = []
    for policy, acc in (("random", [0.60, 0.70, 0.80]), ("evidence", [0.80, 0.75, 0.74])):
        rows += [{"run": "r", "head": "ferl-deep", "fit": "sequential", "policy": policy, "split": "test",
                  "k": k, "accuracy": a, "coverage": 1.0, "mean_set_size": 1.0, "abstention": 0.0,
                  "ignorance": 0.0, "ood": 0.0, "auroc": float("nan")} for k, a in enumerate(acc)]
    true_acc = pd.DataFrame([{"run": "r", "head": "ferl-deep", "fit": "sequential",
                              "true_concepts_accuracy": 0.8}])
    info = {"title": "t", "runs": ["r"], "n_groups": 2, "n_one_hot": 2, "rows": {"test": 10},
            "settings": {"inputs": "calibrated", "expert": "auto"}}
    text = curves_markdown(pd.DataFrame(rows), true_acc, info)
    assert "| gain, all answered (pts) | k for 95 % of the gain |" in text
    assert "| random | 60.0 | 70.0 | 80.0 | +20.0 | 2 |" in text
    assert "| evidence (ours) | 80.0 | 75.0 | 74.0 | -6.0 | no gain |" in text
