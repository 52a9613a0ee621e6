"""Leaf Gaussians (`ferl.novelty.leaf_gaussians`) and the novelty discount on extreme inputs: exact fits,
sample weights spanning hundreds of orders of magnitude, covariances that rounding leaves indefinite."""

import numpy as np
import pytest

from ferl import FERLClassifier
from ferl.benchmarks.ood_kinds import ablation_score
from ferl.novelty.discount import TYPICAL_DISCOUNT


def test_a_leaf_fitted_exactly_gives_finite_scores_and_trusts_its_own_points():
    """Duplicated training points: the within-leaf covariance is 0, the ridge keeps it invertible."""
    X = np.repeat(np.array([[0.0, 0.0, 1.0], [1.0, 1.0, 0.0], [0.0, 1.0, 0.5], [1.0, 0.0, 0.2]]), 25, axis=0)
    y = np.repeat([0, 1, 0, 1], 25)
    clf = FERLClassifier(random_state=0, novelty_discount=True).fit(X, y)
    probes = np.vstack([X[::25], X[::25] + [0, 0, 0.3]])
    assert np.isfinite(clf.ood_score(probes)).all()
    assert clf._reliability(X[::25])[:, clf.tree_.is_leaf].min() >= 1.0 - TYPICAL_DISCOUNT
    ev = clf.evidence(probes)
    assert (ev.ignorance[4:] > ev.ignorance[:4]).all()
    assert np.isfinite(ev.mass).all()


def test_sample_weights_spanning_1e600_fit_finite_leaf_gaussians():
    """Weights from 1e-300 to 1e300: the fold-out covariances cancelled to an indefinite matrix and
    fit stopped in the leaf fit's Cholesky ("Matrix is not positive definite")."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    y = (X[:, 0] + 0.3 * rng.normal(size=60) > 0).astype(int)
    sw = 10 ** np.random.default_rng(0).uniform(-300, 300, 60)
    clf = FERLClassifier("deep", novelty_discount=True, random_state=0).fit(X, y, sample_weight=sw)
    probes = np.vstack([X, X + 3.0])
    assert np.isfinite(clf.leaf_gaussians_.reliability).all()
    assert np.isfinite(clf.ood_score(probes)).all()
    ev = clf.evidence(probes)
    assert np.isfinite(ev.mass).all() and np.isfinite(ev.ignorance).all()


def test_a_fold_holding_nearly_all_the_weight_leaves_the_reliability_finite(tmp_path):
    """Weights from 1e-100 to 1e100: the fold-out moments, taken as the total minus the fold's
    sums, cancelled when one fold held nearly all of a leaf's weight; the fold-out Gaussian was
    rounding noise, its cross-fitted NLLs overflowed to inf, the reliability came out (inf, nan),
    every discounted read-out raised "reliabilities must lie in [0, 1]" and the saved model did not
    load."""
    rng = np.random.default_rng(33)
    y = rng.integers(0, 5, 71)
    sw = 10.0 ** rng.uniform(-100, 100, 71)
    sw[rng.random(71) < 0.2] = 0
    X = np.random.default_rng(1).normal(size=(71, 7))
    clf = FERLClassifier("compact", novelty_discount=True, random_state=0).fit(X, y, sample_weight=sw)
    tau, width = clf.leaf_gaussians_.reliability
    assert np.isfinite(tau) and tau >= 0 and 0 < width < np.inf
    probes = np.vstack([X, X + 3.0])
    ev = clf.evidence(probes)
    np.testing.assert_allclose(ev.mass.sum(axis=1) + ev.ignorance, 1.0)
    loaded = FERLClassifier.load(clf.save(tmp_path / "model"))
    np.testing.assert_array_equal(loaded.evidence(probes).mass, ev.mass)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_fold_out_covariance_of_rank_one_far_above_the_ridge_gives_finite_scores(seed):
    """One row of weight 1e80 and two of weight 1: standardised on the heavy row, the light ones
    lie some 1e40 away, so the heavy row's fold-out covariance (the two light rows: rank one,
    entries near 1e79) hides the ridge below its rounding. Its Cholesky fails and the fallback that
    floored the pivots at the ridge grew the factor to 1e267: the NLLs overflowed and the
    reliability came out (inf, nan) (seeds 0 and 2 here; 13 of 20 seeds at d = 5 with a weight
    of 1e40 or 1e80)."""
    X = np.random.default_rng(seed).normal(size=(3, 5))
    clf = FERLClassifier("compact", novelty_discount=True, random_state=0).fit(
        X, [0, 1, 0], sample_weight=[1.0, 1.0, 1e80])
    tau, width = clf.leaf_gaussians_.reliability
    assert np.isfinite(tau) and tau >= 0 and 0 < width < np.inf
    ev = clf.evidence(np.vstack([X, X + 3.0]))
    np.testing.assert_allclose(ev.mass.sum(axis=1) + ev.ignorance, 1.0)


def _fuzzed(seed):
    """A fuzzer's draw: features and class shifts at scales 1e-150..1e150, sample weights
    1e-290..1e290 (a fifth zero), and probes: the first rows, scaled, and three at up to 1e300."""
    r = np.random.default_rng(seed)
    n, d, c = int(r.integers(2, 120)), int(r.integers(1, 13)), int(r.integers(2, 8))
    y = r.integers(0, c, n)
    y[:2] = [0, 1]
    X = (r.normal(size=(n, d)) * 10.0 ** r.integers(-150, 150, d)
         + y[:, None] * r.random(d) * 10.0 ** r.integers(-150, 150, d))
    if r.random() < 0.3:
        X = np.round(X)
    if r.random() < 0.3:
        X[:, r.integers(0, d)] = r.normal()
    if r.random() < 0.3:
        X, y = np.repeat(X, 2, axis=0), np.repeat(y, 2)
    assert r.random() < 0.6  # the draws that carry weights
    sw = 10.0 ** r.uniform(-290, 290, len(y))
    sw[r.random(len(y)) < 0.2] = 0
    sw[:2] = 1
    r.random(), r.integers(0, 3), r.integers(0, 2)  # the fuzzer's estimator settings
    far = r.normal(size=(3, d)) * 10.0 ** r.integers(-300, 300, (3, d))
    probes = np.vstack([X[:5], X[:5] * 1.5 + 1, far])
    return X, y, sw, probes


@pytest.mark.parametrize(("seed", "variant"), [(598, "medium"), (858, "compact")])
def test_leaf_covariances_hiding_the_ridge_below_rounding_give_finite_scores(seed, variant):
    """Weights spanning 1e580 put the light rows some 1e60 standard deviations from the heavy ones,
    so leaf covariances reach 1e120-1e170 and, in float64, lose their definiteness (smallest
    eigenvalue -2.7e155). The whitening floored their correlations' eigenvalues at the smallest
    normal number: factors of 1e146, and the leaf score of the far probes was inf."""
    X, y, sw, probes = _fuzzed(seed)
    clf = FERLClassifier(variant, random_state=0).fit(X, y, sample_weight=sw)
    for kind in ("leaf", "nll"):
        assert np.isfinite(ablation_score(clf, probes, kind)).all()
    parts = [sum(a.score for a in row) for row in clf.anomalous_features(probes, top_k=None)]
    np.testing.assert_allclose(parts, clf.ood_score(probes), rtol=1e-9)


@pytest.mark.parametrize("seed", [727, 736])
def test_a_model_fitted_on_weights_spanning_1e580_reads_out_and_loads(seed, tmp_path):
    """727: a cross-fitted NLL overflowed to inf, the reliability came out (inf, nan), every
    discounted read-out raised and load refused the file; 736: leaf covariances near 1e58 came out
    indefinite by rounding (smallest eigenvalue -1e42) and load refused the file."""
    X, y, sw, probes = _fuzzed(seed)
    clf = FERLClassifier("medium", novelty_discount=True, random_state=0).fit(X, y, sample_weight=sw)
    tau, width = clf.leaf_gaussians_.reliability
    assert np.isfinite(tau) and tau >= 0 and 0 < width < np.inf
    ev = clf.evidence(probes)
    np.testing.assert_allclose(ev.mass.sum(axis=1) + ev.ignorance, 1.0)
    loaded = FERLClassifier.load(clf.save(tmp_path / "model"))
    np.testing.assert_array_equal(loaded.ood_score(probes), clf.ood_score(probes))
