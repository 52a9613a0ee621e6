"""Tests for the OOD detectors, statistics and method registry of ferl.benchmarks."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ferl.benchmarks.ablations import geometric_ood
from ferl.benchmarks.methods import METHODS, available_methods, make_method
from ferl.benchmarks.ood import (
    IsolationForestDetector,
    KNNDetector,
    MahalanobisDetector,
    holdout_classes,
    run_leave_one_class_out,
)
from ferl.benchmarks.protocol import FoldData
from ferl.benchmarks.stats import friedman, holm, per_dataset_means, wilcoxon_vs


def test_knn_score_is_kth_neighbour_distance():
    X = np.arange(10, dtype=float)[:, None]  # points 0..9
    det = KNNDetector(k=5).fit(X)
    np.testing.assert_allclose(det.score(np.array([[20.0], [-1.0]])), [15.0, 5.0])


def test_mahalanobis_uses_closest_class_and_shared_covariance():
    rng = np.random.default_rng(0)
    X = np.r_[rng.normal(0, 1, (200, 2)), rng.normal(10, 1, (200, 2))]
    y = np.repeat([0, 1], 200)
    det = MahalanobisDetector().fit(X, y)
    near0, near1, far = det.score(np.array([[0.0, 0.0], [10.0, 10.0], [5.0, -8.0]]))
    assert near0 < 1 and near1 < 1 and far > 20


@pytest.mark.parametrize("detector", [MahalanobisDetector, KNNDetector, IsolationForestDetector])
def test_detectors_rank_far_points_as_novel(detector):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 3))
    y = (X[:, 0] > 0).astype(int)
    det = detector().fit(X, y)
    s_in, s_out = det.score(rng.normal(size=(50, 3))), det.score(rng.normal(6, 1, size=(50, 3)))
    assert s_out.min() > np.median(s_in)


def _blobs(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` points per class around three well-separated centres."""
    y = np.repeat([0, 1, 2], n)
    return np.array([[0, 0], [5, 0], [0, 5]])[y] + rng.normal(size=(3 * n, 2)), y


def test_holdout_classes_and_leave_one_class_out_rows():
    assert holdout_classes(4, None, 0) == [0, 1, 2, 3]
    chosen = holdout_classes(10, 3, 0)
    assert len(chosen) == 3 and chosen == holdout_classes(10, 3, 0)
    rng = np.random.default_rng(0)
    (Xf, yf), (Xc, yc), (Xt, yt) = _blobs(rng, 40), _blobs(rng, 15), _blobs(rng, 15)
    rows, skipped = run_leave_one_class_out(FoldData(Xf, yf, Xc, yc, Xt, yt, 3), {}, seed=0)
    assert skipped == set()
    assert {(r["holdout"], r["detector"]) for r in rows} == {
        (c, d) for c in range(3) for d in ("mahalanobis", "knn", "iforest", "lr-msp", "lr-entropy",
                                          "lr-energy")
    }
    knn = [r for r in rows if r["detector"] == "knn"]
    assert all(r["auroc"] > 0.9 for r in knn)  # well-separated held-out class
    assert all(0.85 <= r["accept_id"] <= 1.0 for r in knn)
    with pytest.raises(ValueError, match="3 classes"):
        run_leave_one_class_out(FoldData(Xf, yf % 2, Xc, yc % 2, Xt, yt % 2, 2), {}, seed=0)


def test_geometric_ood_leaves_the_support():
    X = np.random.default_rng(0).random((50, 4))
    G = geometric_ood(X, seed=1)
    assert np.all((G <= -1.0) | (G >= 2.0))
    np.testing.assert_array_equal(G, geometric_ood(X, seed=1))


def test_holm_hand_values():
    np.testing.assert_allclose(holm(np.array([0.01, 0.04, 0.03])), [0.03, 0.06, 0.06])
    np.testing.assert_allclose(holm(np.array([0.5, 0.001])), [0.5, 0.002])


def test_friedman_ranks_and_wilcoxon_holm():
    table = pd.DataFrame(
        {"a": [0.9, 0.8, 0.85, 0.7, 0.95, 0.9], "b": [0.8, 0.7, 0.8, 0.6, 0.9, 0.85],
         "c": [0.7, 0.75, 0.6, 0.65, 0.8, 0.8]},
    )
    stat, p, ranks = friedman(table)
    assert ranks.index[0] == "a" and ranks["a"] == pytest.approx(1.0)
    assert ranks["b"] == pytest.approx((2 + 3 + 2 + 3 + 2 + 2) / 6)
    assert 0 < p < 0.05 and stat > 0
    _, _, low_ranks = friedman(table, higher_is_better=False)
    assert low_ranks.index[0] == "c"
    w = wilcoxon_vs(table, "a").set_index("method")
    assert w.loc["b", "wins"] == 6 and w.loc["b", "mean_diff"] == pytest.approx(0.075)
    assert w.loc["b", "p"] == pytest.approx(0.03125)  # exact two-sided, n = 6, all positive
    assert w.loc["b", "p_holm"] == pytest.approx(2 * 0.03125)
    with pytest.raises(ValueError):
        wilcoxon_vs(table, "zzz")


def test_per_dataset_means_pivots_fold_rows():
    rows = pd.DataFrame({"dataset": ["x", "x", "y"], "method": ["m", "m", "m"],
                         "accuracy": [0.5, 1.0, 0.25]})
    assert per_dataset_means(rows, "accuracy")["m"].tolist() == [0.75, 0.25]


def test_registry_names_and_unknown_method():
    assert {"cart", "c45", "lr", "rf", "hgb", "mlp-conformal", "ferl-deep"} <= set(METHODS)
    names, skipped = available_methods(["cart", "lr"])
    assert names == ["cart", "lr"] and skipped == {}
    with pytest.raises(ValueError, match="close matches"):
        available_methods(["cartt"])
    tree = make_method("c45", 0).estimator
    assert tree.get_params()["criterion"] == "entropy"
    mlp = make_method("mlp-conformal", 0)
    assert mlp.estimator.hidden_layer_sizes == (64,) and mlp.conformal_alpha == 0.1


def test_same_seed_same_rows():
    from sklearn.datasets import load_iris

    from ferl.benchmarks.protocol import make_splits, run_methods, scale_fold

    X, y = load_iris(return_X_y=True)
    data = scale_fold(X, y, make_splits(y, 3, seed=1)[0], 3)
    names = ["rf", "mlp-conformal"]
    first, _ = run_methods(data, names, seed=5)
    again, _ = run_methods(data, names, seed=5)
    drop = ["fit_time", "predict_time"]
    pd.testing.assert_frame_equal(pd.DataFrame(first).drop(columns=drop),
                                  pd.DataFrame(again).drop(columns=drop))
