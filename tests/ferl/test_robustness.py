"""The certificate of the learned weights of evidence (`ferl.evidence.robustness`) and the domain that
both certificates confine the perturbations to (`ferl._inputs.feature_domain`)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import brentq

from ferl import FERLClassifier
from ferl._inputs import feature_domain
from ferl.evidence.robustness import DISCOUNT_FLOOR, ORDER_GAP, bridge_gap, source_bounds, weights_radius
from ferl.evidence.weights import EvidenceWeights, evidence_from_weights, rule_sources
from ferl.tree.fuzzy_tree import FuzzyTree

N_CLASSES, K = 5, 10


def _concepts(rng, n):
    """Concept-like rows: noisy binary prototypes clipped to [0, 1], so that many values sit on an edge."""
    protos = np.random.default_rng(7).random((N_CLASSES, K)) > 0.5
    y = rng.integers(0, N_CLASSES, n)
    X = np.clip(protos[y] + rng.normal(0, 0.6, (n, K)), 0.0, 1.0)
    return X, y


@pytest.fixture(scope="module")
def learned():
    rng = np.random.default_rng(0)
    X, y = _concepts(rng, 500)
    clf = FERLClassifier("deep", evidence_weights="learned", random_state=0).fit(X, y)
    return clf, _concepts(rng, 200)[0]


def _box_points(x, radius, n, rng):
    """``n`` points of the l_inf box of ``radius`` around ``x``, half uniform and half vertices,
    clipped to [0, 1]."""
    inside = rng.uniform(-1.0, 1.0, size=(n // 2, x.size))
    corners = rng.choice([-1.0, 1.0], size=(n - n // 2, x.size))
    return np.clip(x + min(radius, 2.0) * np.vstack([inside, corners]), 0.0, 1.0)


def test_no_point_of_the_domain_within_the_radius_changes_the_predicted_class(learned):
    clf, X = learned
    radius = clf.robustness_radius(X, domain=(0.0, 1.0))
    certified = np.flatnonzero(radius > 0)
    assert certified.size >= 0.5 * len(X)  # the certificate is not vacuous
    assert np.all(radius >= 0)
    pred = clf.predict(X)
    rng = np.random.default_rng(1)
    for i in certified[:40]:
        moved = clf.predict(_box_points(X[i], radius[i], 1000, rng))
        assert (moved == pred[i]).all(), (i, radius[i])


def test_a_greedy_attack_inside_the_radius_fails_and_just_past_a_few_times_it_succeeds(learned):
    """Coordinate search for the smallest lead of the predicted class over the vertices of the box:
    inside the radius it never flips the class; the attack's direction scaled up flips it, so the
    radius is not an arbitrarily small one."""
    clf, X = learned
    radius = clf.robustness_radius(X, domain=(0.0, 1.0))
    flipped = 0
    for i in np.flatnonzero((radius > 0) & np.isfinite(radius))[:10]:
        x, r = X[i], radius[i]
        top = int(np.argmax(clf.predict_proba(x[None])[0]))

        def lead(Z, top=top):
            p = clf.predict_proba(Z)
            return p[:, top] - np.delete(p, top, axis=1).max(axis=1)

        z = x.copy()
        for f in range(K):
            cand = np.tile(z, (3, 1))
            cand[:, f] = np.clip(x[f] + r * np.array([-1.0, 0.0, 1.0]), 0.0, 1.0)
            z = cand[np.argmin(lead(cand))]
        assert lead(z[None])[0] > 0
        flipped += lead(np.clip(x + 4.0 * (z - x), 0.0, 1.0)[None])[0] < 0
    assert flipped >= 3


def test_the_radius_on_one_ramp_solves_the_bridge_in_closed_form():
    """One leaf and one feature source ``s = x``: ``w_0 - w_1 = 4 s - 1`` and ``w+_0 = 2 s``. The
    radius of ``x = 0.8`` (class 0) is ``0.8 - s*`` with ``4 s* - 1 = g(2 s*) + delta``, ``g(w) =
    -log(1 - exp(-w) / 2)``: short of the flip at ``s = 0.25``. In the domain [0.5, 1] the class
    never changes: radius inf."""
    tree = FuzzyTree(n_classes=2)
    tree.add_node(-1, 0, [0.5, 0.5], 1.0)
    tree.finalize()
    weights = EvidenceWeights(coef=np.array([[2.0, 0.0], [-2.0, 0.0]]), intercept=np.array([-0.5, 0.5]))
    feature_range = np.array([[0.0, 1.0]])
    X = np.array([[0.8]])
    sources = rule_sources(X, feature_range, np.ones((1, 1)))
    delta = -np.log1p(-2 * ORDER_GAP)
    s_star = brentq(lambda s: 4 * s - 1 + np.log(1 - np.exp(-2 * s) / 2) - delta, 0.25, 0.8)
    assert 0.3 < s_star < 0.5

    def radius(domain):
        return weights_radius(weights, tree, X, sources, feature_range, np.ones(1), True,
                              feature_domain(domain, feature_range))[0]

    assert radius(None) == pytest.approx(0.8 - s_star, abs=1e-8)
    assert radius((0.5, 1.0)) == np.inf
    below = rule_sources(np.array([[0.24]]), feature_range, np.ones((1, 1)))
    assert np.argmax(evidence_from_weights(weights, below).pignistic) == 1  # past the flip: class 1


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.integers(2, 6), st.integers(1, 5), st.floats(0.1, 6.0))
def test_the_bridge_bounds_the_ratio_of_pignistic_probabilities(seed, n_classes, n_sources, scale):
    """Part 1 of the proof: ``BetP(t) / BetP(c) >= exp(w_t - w_c - g(w+_t))`` for every pair."""
    rng = np.random.default_rng(seed)
    coef = rng.normal(size=(n_classes, n_sources)) * scale
    intercept = rng.normal(size=n_classes) * scale
    weights = EvidenceWeights(coef - coef.mean(0), intercept - intercept.mean())
    s = rng.uniform(size=(4, n_sources))
    betp = evidence_from_weights(weights, s).pignistic
    w = s @ weights.coef.T + weights.intercept
    w_plus = s @ np.maximum(weights.coef, 0).T + np.maximum(weights.intercept, 0)
    gap = bridge_gap(w_plus, n_classes)
    assert np.all((gap >= 0) & (gap <= np.log(n_classes) + 1e-12))
    for t in range(n_classes):
        bound = np.exp(w[:, [t]] - w - gap[:, [t]]) * betp
        assert np.all(betp[:, [t]] >= bound - 1e-9)


def test_the_source_bounds_hold_every_source_over_the_box(learned):
    clf, X = learned
    tree, margin, domain = clf.tree_, clf._gate_margin(), feature_domain((0.0, 1.0), clf.feature_range_)
    rng = np.random.default_rng(2)
    for r in (0.0, 0.02, 0.1, 0.4):
        rows = X[:30]
        lower, upper = source_bounds(tree, rows, np.full(len(rows), r), domain, clf.feature_range_, margin,
                                     True)
        assert np.all((lower >= 0) & (lower <= upper) & (upper <= 1))
        for i in range(len(rows)):
            Z = _box_points(rows[i], r, 200, rng)
            phi = tree.firing(Z, True, margin)[0]
            s = rule_sources(Z, clf.feature_range_, phi[:, tree.is_leaf])
            assert np.all((s >= lower[i] - 1e-15) & (s <= upper[i] + 1e-15))
        if r == 0.0:
            phi = tree.firing(rows, True, margin)[0]
            np.testing.assert_array_equal(lower, rule_sources(rows, clf.feature_range_, phi[:, tree.is_leaf]))


def test_explain_gives_the_radius_of_its_row(learned):
    clf, X = learned
    for domain in (None, (0.0, 1.0), "training"):
        radius = clf.robustness_radius(X[:5], domain=domain)
        assert [clf.explain(X[i], domain=domain).robustness_radius for i in range(5)] == list(radius)


def test_the_domain_only_widens_the_radius(learned):
    clf, X = learned
    free, bounded = clf.robustness_radius(X), clf.robustness_radius(X, domain=(0.0, 1.0))
    assert np.all(bounded >= free - 1e-9)


def test_a_per_rule_discount_certifies_nothing(learned):
    clf, X = learned
    rules = FERLClassifier("deep", evidence_weights="learned", novelty_discount="rules",
                           random_state=0).fit(*_concepts(np.random.default_rng(0), 500))
    np.testing.assert_array_equal(rules.robustness_radius(X[:10], domain=(0, 1)), np.zeros(10))


def test_the_discount_floor_is_far_above_rounding():
    assert 1e-7 < DISCOUNT_FLOOR < 1e-5


def test_feature_domain_reads_every_form():
    feature_range = np.array([[0.0, 2.0], [-1.0, 1.0]])
    np.testing.assert_array_equal(feature_domain(None, feature_range), [[-np.inf, np.inf]] * 2)
    got = feature_domain("training", feature_range)
    np.testing.assert_array_equal(got, feature_range)
    assert got is not feature_range
    np.testing.assert_array_equal(feature_domain((0, 1), feature_range), [[0.0, 1.0]] * 2)
    bounds = [[0, 3], [-np.inf, 0]]
    np.testing.assert_array_equal(feature_domain(bounds, feature_range), bounds)


@pytest.mark.parametrize("domain, message", [
    ("train", r"domain must be None, 'training', \(lo, hi\) or an array of shape \(2, 2\); got 'train'"),
    ((0, 1, 2), r"domain must be \(lo, hi\) or an array of shape \(2, 2\), got shape \(3,\)"),
    ([[0, 1]] * 3, r"got shape \(3, 2\)"),
    ((1.0, 0.0), r"domain of feature 0 is \[1.0, 0.0\]: need lo <= hi"),
    ([[0, 1], [np.nan, 1]], r"domain of feature 1 is \[nan, 1.0\]"),
    (("a", "b"), r"domain must hold numbers, got \('a', 'b'\)"),
    ({"lo": 0}, r"domain must hold numbers|got shape \(\)"),
])
def test_feature_domain_refuses_bad_bounds_with_a_message(domain, message):
    with pytest.raises(ValueError, match=message):
        feature_domain(domain, np.array([[0.0, 2.0], [-1.0, 1.0]]))


def test_robustness_radius_names_a_bad_domain(learned):
    clf, X = learned
    with pytest.raises(ValueError, match="domain must be"):
        clf.robustness_radius(X[:2], domain="everywhere")
    with pytest.raises(ValueError, match="domain must be"):
        clf.explain(X[0], domain=(0, 1, 2))
    # bounds that hold no real value gave radius 0 for (inf, inf) and a finite or infinite one for
    # (-inf, -inf)
    for empty in ((np.inf, np.inf), (-np.inf, -np.inf)):
        with pytest.raises(ValueError, match="holds a real value"):
            clf.robustness_radius(X[:2], domain=empty)
