"""Learned weights of evidence (`ferl.evidence.weights`) and the coverage-targeted credal set."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression

from ferl import FERLClassifier
from ferl.evidence.combination import legendre_rule, legendre_table, pignistic_integrals, quadrature_nodes
from ferl.evidence.conformal import coverage_set
from ferl.evidence.weights import (
    BETP_TOL,
    EvidenceWeights,
    evidence_from_weights,
    fit_evidence_weights,
    rule_sources,
)


def _brute_force(coef, intercept, s):
    """Dempster's rule over every simple mass function, one subset of the frame at a time."""
    n_classes = coef.shape[0]
    frame = frozenset(range(n_classes))
    m = {frame: 1.0}
    weights = [(k, coef[k, j] * s[j]) for k in range(n_classes) for j in range(s.size)]
    weights += [(k, intercept[k]) for k in range(n_classes)]
    for k, w in weights:
        if w == 0:
            continue
        focal = frozenset([k]) if w > 0 else frame - {k}
        source = {focal: -np.expm1(-abs(w)), frame: np.exp(-abs(w))}
        out = {}
        for a, ma in m.items():
            for b, mb in source.items():
                out[a & b] = out.get(a & b, 0.0) + ma * mb
        m = out
    conflict = m.pop(frozenset(), 0.0)
    m = {a: v / (1 - conflict) for a, v in m.items()}
    single = np.array([m.get(frozenset([k]), 0.0) for k in range(n_classes)])
    pl = np.array([sum(v for a, v in m.items() if k in a) for k in range(n_classes)])
    betp = np.array([sum(v / len(a) for a, v in m.items() if k in a) for k in range(n_classes)])
    return single, pl, betp, m.get(frame, 0.0), conflict


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.integers(2, 5), st.integers(1, 4), st.floats(0.1, 4.0))
def test_closed_form_equals_dempsters_rule_over_every_subset(seed, n_classes, n_sources, scale):
    rng = np.random.default_rng(seed)
    coef = rng.normal(size=(n_classes, n_sources)) * scale
    intercept = rng.normal(size=n_classes) * scale
    s = rng.uniform(size=(3, n_sources))
    s[0] = 0.0  # no rule fires: the prior source alone
    ev = evidence_from_weights(EvidenceWeights(coef - coef.mean(0), intercept - intercept.mean()), s)
    for i in range(3):
        single, pl, betp, theta, conflict = _brute_force(coef - coef.mean(0), intercept - intercept.mean(),
                                                         s[i])
        np.testing.assert_allclose(ev.mass[i], single, rtol=1e-6, atol=1e-10)
        np.testing.assert_allclose(ev.plausibility[i], pl, rtol=1e-6, atol=1e-10)
        np.testing.assert_allclose(ev.pignistic[i], betp, rtol=1e-6, atol=1e-9)
        assert ev.ignorance[i] == pytest.approx(theta, abs=1e-10)
        assert ev.conflict[i] == pytest.approx(conflict, abs=1e-10)
    assert np.all(ev.belief <= ev.pignistic + 1e-12) and np.all(ev.pignistic <= ev.plausibility + 1e-12)


def test_normalised_plausibility_is_the_logistic_regressions_softmax():
    """Denœux (2019): the combination's contour function, normalised, is the softmax of the fit."""
    X, y = make_classification(300, 6, n_informative=4, n_classes=3, random_state=1)
    s = rule_sources(X, np.stack([X.min(0), X.max(0)], 1), np.zeros((300, 0)))
    weights = fit_evidence_weights(s, y, np.ones(300), 3)
    ev = evidence_from_weights(weights, s)
    lr = LogisticRegression(max_iter=3000).fit(s, y)
    np.testing.assert_allclose(ev.plausibility / ev.plausibility.sum(1, keepdims=True), lr.predict_proba(s),
                               atol=1e-6)


def test_extreme_weights_stay_finite_and_sum_to_one():
    coef = np.array([[400.0, -400.0], [-400.0, 400.0], [0.0, 0.0]])
    s = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0]])
    ev = evidence_from_weights(EvidenceWeights(coef, np.zeros(3)), s)
    for field in (ev.mass, ev.ignorance, ev.conflict, ev.plausibility, ev.pignistic):
        assert np.isfinite(field).all()
    np.testing.assert_allclose(ev.pignistic.sum(1), 1.0, atol=1e-9)
    assert ev.pignistic[0].argmax() == 0 and ev.ignorance[2] == pytest.approx(1.0)


@pytest.mark.parametrize("w", [10.0, 37.0, 40.0, 100.0, 800.0])
def test_every_class_strongly_refuted_keeps_exact_masses(w):
    """Two classes, each refuted with weight ``w`` and nothing for either: ``m({k}) = b / (1 + b)``
    with ``b = 1 - exp(-w)``, ``m(Theta) = a / (1 + b)``. ``log(-expm1(-w))`` rounds to 0 from
    ``w`` of about 37 on, which made ``q = 1 - b^2`` vanish: 23 % off at 37, NaN from 38 on."""
    ev = evidence_from_weights(EvidenceWeights(np.array([[-w], [-w]]), np.zeros(2)), np.ones((1, 1)))
    b = -np.expm1(-w)
    np.testing.assert_allclose(ev.mass[0], b / (1.0 + b), rtol=1e-12)
    np.testing.assert_allclose(ev.pignistic[0], 0.5, rtol=1e-12)
    assert ev.ignorance[0] == pytest.approx(np.exp(-w) / (1.0 + b), rel=1e-9, abs=1e-300)
    assert np.isfinite(ev.conflict).all()


def test_opposite_strong_evidence_stays_finite():
    """Each class supported by one source and refuted by the other, at weight 40 (NaN before)."""
    weights = EvidenceWeights(np.array([[-40.0, 40.0], [40.0, -40.0]]), np.zeros(2))
    ev = evidence_from_weights(weights, np.array([[1.0, 1.0], [1.0, 0.0]]))
    for field in (ev.mass, ev.ignorance, ev.conflict, ev.plausibility, ev.pignistic):
        assert np.isfinite(field).all()
    np.testing.assert_allclose(ev.pignistic.sum(axis=1), 1.0, atol=1e-9)
    np.testing.assert_allclose(ev.pignistic[0], 0.5, atol=1e-9)  # symmetric
    assert ev.pignistic[1].argmax() == 1


def test_one_class_is_refused():
    with pytest.raises(ValueError, match="at least 2 classes"):
        evidence_from_weights(EvidenceWeights(np.zeros((1, 1)), np.zeros(1)), np.zeros((1, 1)))


@pytest.mark.parametrize("n_classes", [3, 200, 400])
def test_pignistic_integral_is_exact_where_its_products_underflow(n_classes):
    """With no evidence against any class (``a = 1``) the integral of ``prod_{l != k} t`` is
    ``1 / C``; at 400 classes the products at the smallest quadrature node underflow (about
    1e-1900) and the quadrature must still give ``1 / C`` to rounding (of 200 quadrature weights).
    A class refuted outright (``a = 0``) gets the integral over the others, ``1 / (C - 1)`` here."""
    a = np.ones((2, n_classes))
    a[1, 0] = 0.0
    nodes, weights = legendre_table(n_classes)
    out = pignistic_integrals(a, nodes, weights)
    np.testing.assert_allclose(out[0], 1.0 / n_classes, rtol=1e-10)
    np.testing.assert_allclose(out[1, 1:], 1.0 / (n_classes - 1), rtol=1e-10)
    assert out[1, 0] == pytest.approx(1.0 / n_classes, rel=1e-10)


def test_fewer_nodes_only_where_the_integrand_is_nearly_of_low_degree():
    """200 factors (101 nodes exact): a few nodes where the ``a`` sum to a few units, all 101 where
    they sum to 200, the most a sum can be."""
    assert quadrature_nodes(200, 0.5, 101) <= 10
    assert 10 < quadrature_nodes(200, 4.0, 101) <= 20
    assert quadrature_nodes(200, 200.0, 101) == 101
    assert quadrature_nodes(0, 0.0, 1) == 1


@pytest.mark.parametrize("total", [0.05, 1.0, 4.0, 15.0])
def test_pignistic_integrals_with_fewer_nodes_stay_within_the_tolerance(total):
    """Against the 128-node rule (exact to degree 255 > 199): every integral within ``BETP_TOL / m``
    plus rounding (the integral is below 1, of 200 products)."""
    rng = np.random.default_rng(int(total * 100))
    a = rng.dirichlet(np.ones(200), size=20) * total
    a[:, :5] = np.minimum(a[:, :5] * 50, 1.0)  # a few classes far less refuted than the rest
    nodes, weights = legendre_table(200)
    out = pignistic_integrals(a, nodes, weights)
    t, w = legendre_rule(128)
    factors = 1.0 - a[:, :, None] * (1.0 - t)  # (rows, classes, nodes)
    every = np.prod(factors, axis=1, keepdims=True)
    exact = np.einsum("ikq,q->ik", every / factors, w)
    np.testing.assert_allclose(out, exact, rtol=0, atol=BETP_TOL / 200 + 1e-14)


@pytest.fixture(scope="module")
def learned():
    X, y = make_classification(900, 8, n_informative=5, n_classes=4, flip_y=0.1, random_state=0)
    clf = FERLClassifier("deep", random_state=0, evidence_weights="learned").fit(X[:300], y[:300])
    return clf, X, y


def test_learned_model_saves_loads_and_explains_the_same_evidence(learned, tmp_path):
    clf, X, _ = learned
    clf.calibrate_sets(X[300:600], learned[2][300:600])
    clf.save(tmp_path)
    back = FERLClassifier.load(tmp_path)
    np.testing.assert_array_equal(back.predict_proba(X[600:]), clf.predict_proba(X[600:]))
    sets = clf.predict_set(X[600:], coverage=0.9)
    np.testing.assert_array_equal(back.predict_set(X[600:], coverage=0.9), sets)
    ex = clf.explain(X[650])
    np.testing.assert_allclose(ex.probability, clf.predict_proba(X[650:651])[0])
    assert ex.prediction == clf.predict(X[650:651])[0]


def test_a_hand_edited_weights_file_is_refused(learned, tmp_path):
    clf, _, _ = learned
    clf.save(tmp_path)
    folder = next(p for p in tmp_path.iterdir() if p.is_dir())
    arrays = dict(np.load(folder / "model.npz"))
    arrays["weights_coef"] = arrays["weights_coef"][:, :-1]
    np.savez(folder / "model.npz", **arrays)
    with pytest.raises(ValueError, match="weights_coef|changed or damaged"):
        FERLClassifier.load(tmp_path)


def test_coverage_targeted_sets_cover_within_binomial_tolerance():
    """Split conformal on exchangeable data: coverage >= target - 3 binomial sds (many test rows)."""
    X, y = make_classification(6000, 8, n_informative=5, n_classes=5, flip_y=0.15, random_state=3)
    clf = FERLClassifier("deep", random_state=0, evidence_weights="learned").fit(X[:1500], y[:1500])
    clf.calibrate_sets(X[1500:3000], y[1500:3000])
    n = 3000
    for coverage in (0.8, 0.9, 0.95):
        sets = clf.predict_set(X[3000:], coverage=coverage)
        covered = sets[np.arange(n), y[3000:]].mean()
        sd = np.sqrt(coverage * (1 - coverage) / n)
        assert coverage - 3 * sd <= covered <= coverage + 3 * sd + 1.5 / 1500, (coverage, covered)
    small, large = (clf.predict_set(X[3000:], coverage=c).sum(1).mean() for c in (0.8, 0.95))
    assert small < large


def test_coverage_needs_calibration_and_a_valid_level():
    X, y = make_classification(200, 4, n_informative=3, n_redundant=0, n_classes=3, random_state=0)
    clf = FERLClassifier("deep", random_state=0).fit(X, y)
    with pytest.raises(ValueError, match="calibrate_sets"):
        clf.predict_set(X, coverage=0.9)
    clf.calibrate_sets(X, y)
    with pytest.raises(ValueError, match="coverage must be in"):
        clf.predict_set(X, coverage=1.0)
    with pytest.raises(ValueError, match="not among classes_"):
        clf.calibrate_sets(X, y + 7)


def test_coverage_set_is_the_plausibility_threshold_and_never_empty():
    pl = np.array([[0.9, 0.5, 0.1], [0.2, 0.3, 0.25], [1.0, 1.0, 0.0]])
    scores = np.array([0.05, 0.4, 0.6, 0.8])  # 1 - Pl(y) of four held-out inputs
    # coverage 0.5: k = ceil(5 * 0.5) = 3rd smallest score, q = 0.6: Pl(c) >= 0.4
    np.testing.assert_array_equal(coverage_set(pl, scores, 0.5),
                                  [[True, True, False], [False, True, False], [True, True, False]])
    np.testing.assert_array_equal(coverage_set(pl, scores, 0.2).sum(1), [1, 1, 2])  # q = 0.05; top kept
    with pytest.raises(ValueError, match="coverage must be in"):
        coverage_set(pl, scores, 0.0)


def test_a_learned_model_certifies_the_class_of_its_weights(learned):
    """The tree's certificate (appendix A.3) bounds P_T; a learned model's radius is the weights'
    (`ferl.evidence.robustness`, tested in test_robustness.py): most rows get one."""
    clf, X, _ = learned
    radius = clf.robustness_radius(X[600:620])
    assert (radius > 0).sum() >= 10 and np.isfinite(radius).all()
    assert clf.explain(X[600]).robustness_radius == radius[0]


def test_features_used_counts_every_feature_the_learned_weights_read():
    # two rows: one leaf and no split, yet the learned weights read the features that vary
    X = np.array([[0.9, 0.1, 0.5, 0.2], [0.1, 0.8, 0.5, 0.3]])
    learned = FERLClassifier("deep", evidence_weights="learned", random_state=0).fit(X, [0, 1])
    assert learned.n_rules_ == 1 and learned.features_used_.tolist() == [0, 1, 3]  # was []
    probe = np.array([[0.5, 0.5, 0.5, 0.25]])
    for j, moves in ((0, True), (1, True), (2, False), (3, True)):  # feature 2 is constant in training
        changed = probe.copy()
        changed[0, j] = 0.9
        assert (learned.predict_proba(changed) != learned.predict_proba(probe)).any() == moves
    tree = FERLClassifier("deep", random_state=0).fit(X, [0, 1])
    assert tree.evidence_weights_ is None and tree.features_used_.tolist() == []  # the tree reads none
