"""Wide inputs, fewer training rows than features (full covariances ran out of time
and memory): diagonal leaf Gaussians
(`ferl.novelty.leaf_fit`), linear in the width, the full model's variances, the same read-out."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest

from ferl import FERLClassifier
from ferl.benchmarks.ood import ferl_score
from ferl.benchmarks.ood_kinds import ablation_score
from ferl.novelty import leaf_gaussians
from ferl.novelty.leaf_fit import diagonal_leaves
from ferl.novelty.leaf_gaussians import LeafGaussians, leaf_terms
from ferl.novelty.linalg import standardise


def _data(n: int, d: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    X = rng.random((n, d)) + 0.8 * y[:, None] * (np.arange(d) < 3)  # three informative features
    return X, y


def test_the_rule_is_fewer_rows_of_positive_weight_than_features():
    assert diagonal_leaves(np.ones(9), 10) and not diagonal_leaves(np.ones(10), 10)
    assert diagonal_leaves(np.r_[np.ones(10), np.zeros(5)], 11)  # rows of weight 0 do not count
    X, y = _data(40, 40)
    assert FERLClassifier(variant="deep", random_state=0).fit(X, y).leaf_gaussians_.cov.shape[1:] == (40, 40)


def test_two_rows_of_twenty_thousand_features_fit_without_a_square_array():
    # 2 x 10,000 took 276 s (the ZCA whitening's d x d eigendecomposition): nothing d x d is built now
    X, y = _data(2, 20_000)
    clf = FERLClassifier(variant="deep", random_state=0).fit(X, y)
    leaves = clf.leaf_gaussians_
    assert leaves.cov.shape == (clf.tree_.is_leaf.sum(), 20_000) and leaves.whiten_t.shape[1] == 1
    assert np.isfinite(ablation_score(clf, X[:1] + 0.5, "leaf")).all()


def test_the_diagonal_model_keeps_the_full_models_means_and_variances():
    X, y = _data(30, 45)
    diagonal = FERLClassifier(variant="deep", random_state=0).fit(X, y)
    with mock.patch.object(leaf_gaussians, "diagonal_leaves", lambda sw, d: False):
        full = FERLClassifier(variant="deep", random_state=0).fit(X, y)
    np.testing.assert_array_equal(diagonal.tree_.feature, full.tree_.feature)  # the same tree
    a, b = diagonal.leaf_gaussians_, full.leaf_gaussians_
    assert a.cov.shape == (len(a.leaves), 45) and b.cov.shape == (len(a.leaves), 45, 45)
    np.testing.assert_allclose(a.mean, b.mean, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(a.cov, np.diagonal(b.cov, axis1=1, axis2=2), rtol=1e-10)
    assert (np.abs(b.cov - np.diagonal(b.cov, axis1=1, axis2=2)[:, :, None] * np.eye(45)).max() > 0.01)
    np.testing.assert_array_equal(diagonal.predict(X), full.predict(X))  # the evidence is the tree's


def test_a_diagonal_model_reads_out_as_a_full_model_of_diagonal_covariances():
    X, y = _data(20, 30)
    clf = FERLClassifier(variant="deep", random_state=0).fit(X, y)
    diag = clf.leaf_gaussians_
    as_full = LeafGaussians(diag.center, diag.scale, diag.leaves, diag.mean,
                            diag.cov[:, :, None] * np.eye(30), diag.reliability)
    X_new = np.random.default_rng(1).random((40, 30)) * 2
    U = standardise(X_new, diag.center, diag.scale)
    phi0 = np.random.default_rng(2).random((40, len(diag.leaves)))
    phi0[phi0 < 0.3] = 0.0
    for got, expected in zip(leaf_terms(diag, U, phi0), leaf_terms(as_full, U, phi0), strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(diag.half_share, as_full.half_share, rtol=1e-12)
    before = ablation_score(clf, X_new, "leaf")
    clf.leaf_gaussians_ = as_full
    after = ablation_score(clf, X_new, "leaf")
    np.testing.assert_allclose(after, before, rtol=1e-12)  # the sparse kernel too


def test_a_diagonal_model_saves_and_loads_its_variances(tmp_path):
    X, y = _data(12, 25)
    clf = FERLClassifier(variant="deep", random_state=0).fit(X, y)
    loaded = FERLClassifier.load(clf.save(tmp_path / "m"))
    np.testing.assert_array_equal(loaded.leaf_gaussians_.cov, clf.leaf_gaussians_.cov)
    np.testing.assert_array_equal(loaded.ood_score(X, "typical"), clf.ood_score(X, "typical"))
    with np.load(next((tmp_path / "m").glob("v-*/model.npz"))) as npz:
        assert "leaf_cov_diag" in npz.files and "leaf_cov_tril" not in npz.files


@pytest.mark.parametrize("kind", ["typical", "leaf", "nll", "combined"])
def test_wide_scores_are_finite_and_grow_off_the_training_rows(kind):
    X, y = _data(10, 300)
    clf = FERLClassifier(variant="deep", random_state=0).fit(X, y)
    near, far = ferl_score(clf, X, kind), ferl_score(clf, X + 3.0, kind)
    assert np.isfinite(near).all() and (far > near).all()
    assert len(clf.anomalous_features(X[:2] + 3.0, top_k=4)[0]) == 4
