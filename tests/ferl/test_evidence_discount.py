"""The "typical" novelty discount of the combined evidence (`ferl.novelty.discount`,
`ferl.evidence.discount_evidence`): its algebra, its reliability and its reference."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from ferl import FERLClassifier
from ferl.benchmarks.ood_kinds import ablation_score
from ferl.evidence import Evidence, combine, discount_evidence, interval_dominance
from ferl.novelty.discount import DISCOUNT_QUANTILES, DISCOUNT_SLOPE, fit_discount, reliability_curve
from ferl.novelty.scores import reference_rows

N_CLASSES = 3
probs = arrays(np.float64, (4, N_CLASSES), elements=st.floats(0.01, 1.0)).map(
    lambda a: a / a.sum(axis=1, keepdims=True))
firings = arrays(np.float64, (1, 4), elements=st.floats(0.0, 1.0))


def _combined(value, phi):
    return combine(phi, value, np.ones(4, dtype=bool))


# ---------------------------------------------------------------------- the algebra
@settings(max_examples=80, deadline=None)
@given(value=probs, phi=firings, r=st.floats(0.0, 1.0))
def test_discounted_masses_sum_to_one_and_bel_betp_pl_stay_ordered(value, phi, r):
    ev = discount_evidence(_combined(value, phi), np.array([r]))
    assert ev.mass.sum() + ev.ignorance[0] == pytest.approx(1.0, abs=1e-12)
    assert (ev.mass >= 0).all() and 0.0 <= ev.ignorance[0] <= 1.0
    assert (ev.belief <= ev.pignistic + 1e-12).all() and (ev.pignistic <= ev.plausibility + 1e-12).all()


@settings(max_examples=80, deadline=None)
@given(value=probs, phi=firings, r=st.floats(0.0, 1.0))
def test_the_discount_is_the_mixture_with_the_vacuous_mass_and_keeps_the_decision(value, phi, r):
    ev = _combined(value, phi)
    out = discount_evidence(ev, np.array([r]))
    np.testing.assert_allclose(out.mass, r * ev.mass, atol=1e-15)
    assert out.ignorance[0] == pytest.approx(r * ev.ignorance[0] + (1 - r), abs=1e-12)
    np.testing.assert_allclose(out.pignistic, r * ev.pignistic + (1 - r) / N_CLASSES, atol=1e-12)
    if r > 1e-6:  # below, the spread of BetP drowns in round-off
        # the class chosen after is a most probable one before (classes tied within round-off may swap)
        assert ev.pignistic[0, np.argmax(out.pignistic)] >= ev.pignistic.max() - 1e-12
    # a class never dominated before is never dominated after: the credal set only grows
    assert (out.credal_set >= ev.credal_set).all()
    assert out.ignorance[0] >= ev.ignorance[0] - 1e-15


@settings(max_examples=40, deadline=None)
@given(value=probs, phi=firings)
def test_full_reliability_changes_nothing_and_zero_is_vacuous(value, phi):
    ev = _combined(value, phi)
    assert discount_evidence(ev, np.ones(1)) is ev
    zero = discount_evidence(ev, np.zeros(1))
    np.testing.assert_array_equal(zero.mass, 0.0)
    assert zero.ignorance[0] == 1.0 and zero.abstain[0]


def test_a_vacuous_mass_stays_vacuous_at_any_reliability():
    ev = Evidence(np.zeros((3, N_CLASSES)), np.ones(3), np.zeros(3))
    out = discount_evidence(ev, np.array([0.0, 0.3, 0.9]))
    np.testing.assert_array_equal(out.ignorance, 1.0)
    assert out.abstain.all()


def test_the_set_grows_to_the_frame_once_r_is_at_most_one_over_one_plus_the_margin():
    ev = Evidence(np.array([[0.6, 0.2, 0.1]]), np.array([0.1]), np.zeros(1))  # margin 0.6 - 0.1 - 0.1
    edge = 1 / 1.4
    assert not discount_evidence(ev, np.array([edge + 1e-6])).abstain[0]
    assert discount_evidence(ev, np.array([edge - 1e-6])).abstain[0]


@pytest.mark.parametrize("r", [np.array([1.2]), np.array([-0.1]), np.array([np.nan]), np.ones(2)])
def test_bad_reliabilities_are_refused(r):
    ev = Evidence(np.array([[0.6, 0.2, 0.1]]), np.array([0.1]), np.zeros(1))
    with pytest.raises(ValueError, match="reliabilit"):
        discount_evidence(ev, r)


# ---------------------------------------------------------------------- the reliability
def test_the_reliability_falls_slowly_to_tau_then_halves_every_lambda_log_2():
    s = np.linspace(0.0, 20.0, 401)
    r = reliability_curve(s, 4.0, 2.0, 0.1)
    assert (np.diff(r) < 0).all() and r[0] == 1.0
    assert reliability_curve(np.array([4.0]), 4.0, 2.0, 0.1)[0] == pytest.approx(np.exp(-0.1))
    halves = reliability_curve(np.array([4.0 + 2.0 * np.log(2.0)]), 4.0, 2.0, 0.1)[0]
    assert halves == pytest.approx(np.exp(-0.1) / 2)
    np.testing.assert_array_equal(reliability_curve(np.array([0.0, 3.0]), 0.0, 1.0, 0.1),
                                  [1.0, np.exp(-3.0)])


def test_fit_discount_reads_the_quantiles_of_the_reference():
    reference = np.arange(1001, dtype=np.float64)
    tau, lam = fit_discount(reference)
    q0, q1 = np.quantile(reference, DISCOUNT_QUANTILES)
    assert tau == pytest.approx(q0) and tau + lam * np.log(2) == pytest.approx(q1)
    assert fit_discount(np.zeros(5))[1] > 0  # a flat reference still has a positive scale


# ---------------------------------------------------------------------- on a fitted model
def _world(seed, n, shift=0.0):
    """Four classes, each a cluster of six correlated features; ``shift`` moves the inputs
    along a direction no class spans (near-OOD: every value stays in the training range)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 4, n)
    centres = np.array([[0.2, 0.2, 0.8, 0.8, 0.5, 0.5], [0.8, 0.2, 0.2, 0.8, 0.5, 0.5],
                        [0.2, 0.8, 0.8, 0.2, 0.5, 0.5], [0.8, 0.8, 0.2, 0.2, 0.5, 0.5]])
    X = centres[y] + 0.06 * rng.normal(size=(n, 6))
    X[:, 5] = X[:, 4] + 0.02 * rng.normal(size=n)
    X[:, 4] += shift
    X[:, 5] -= shift
    return X, y


@pytest.fixture(scope="module")
def fitted():
    X, y = _world(0, 800)
    return FERLClassifier("deep", random_state=0).fit(X, y), X, y


def test_a_planted_near_ood_input_gets_ignorance_and_abstains_only_with_the_discount(fitted):
    clf, _, _ = fitted
    X_id, y_id = _world(1, 400)
    X_near, _ = _world(2, 400, shift=0.15)
    off_id, off_near = clf.evidence(X_id), clf.evidence(X_near)
    clf.set_params(novelty_discount=True)
    try:
        on_id, on_near = clf.evidence(X_id), clf.evidence(X_near)
        np.testing.assert_array_equal(clf.predict(X_id), clf.set_params(novelty_discount=False).predict(X_id))
    finally:
        clf.set_params(novelty_discount=False)
    assert off_near.abstain.mean() < 0.2 and off_near.ignorance.mean() < 0.2
    assert on_near.abstain.mean() > 0.8 and on_near.ignorance.mean() > 0.6
    # in distribution: about 1 - q1 of the inputs lie past the quantile where r halves
    assert on_id.abstain.mean() - off_id.abstain.mean() <= 2 * (1 - DISCOUNT_QUANTILES[1]) + 0.02
    assert np.median(on_id.ignorance - off_id.ignorance) <= 1 - np.exp(-DISCOUNT_SLOPE) + 1e-12
    assert (on_id.ignorance >= off_id.ignorance - 1e-15).all()


def test_the_discounted_ignorance_ranks_like_the_typical_score(fitted):
    clf, _, _ = fitted
    X = np.vstack([_world(3, 200)[0], _world(4, 200, shift=0.1)[0]])
    clf.set_params(novelty_discount=True)
    try:
        ignorance = ablation_score(clf, X, "ignorance")
        readout = clf.credal_readout(X, "typical")
    finally:
        clf.set_params(novelty_discount=False)
    np.testing.assert_array_equal(readout.evidence.ignorance, ignorance)
    typical = clf.ood_score(X, "typical")
    np.testing.assert_array_equal(readout.ood_score, typical)
    paper = clf.evidence(X).ignorance
    r = 1 - (1 - ignorance) / np.maximum(1 - paper, 1e-300)
    keep = paper < 0.99
    order = np.argsort(typical[keep], kind="stable")
    assert (np.diff(r[keep][order]) >= -1e-9).all()  # 1 - r(x) rises with the typical score


def test_the_discount_scale_comes_from_cross_fitted_scores_above_the_in_sample_ones(fitted):
    """The reference rows' in-sample typical scores flatter them: the discount's quantiles come
    from their cross-fitted scores, which lie higher (and so do unseen inputs')."""
    clf, X, _ = fitted
    in_sample = clf.ood_score(X[reference_rows(np.ones(len(X)))], "typical")
    tau, lam = clf.rule_prototypes_.discount
    q0, q1 = np.quantile(in_sample, DISCOUNT_QUANTILES)
    assert tau > q0 and tau + lam * np.log(2) > q1
    unseen = clf.ood_score(_world(5, 2000)[0], "typical")
    assert abs(np.mean(unseen > tau) - (1 - DISCOUNT_QUANTILES[0])) < abs(np.mean(unseen > q0)
                                                                          - (1 - DISCOUNT_QUANTILES[0]))


def test_explain_shows_the_evidence_reliability(fitted, tmp_path):
    clf, _, _ = fitted
    x = _world(6, 5, shift=0.12)[0][0]
    clf.set_params(novelty_discount=True)
    try:
        e = clf.explain(x)
        ev = clf.evidence(x[None])
        assert e.ignorance == pytest.approx(ev.ignorance[0], abs=1e-12) and e.abstain == bool(ev.abstain[0])
        assert e.reliability < 0.5 and "evidence reliability r(x)" in e.to_markdown()
        assert e.to_dict()["reliability"] == e.reliability
        assert all(s.reliability == 1.0 for s in e.sources)  # the sources themselves are not discounted
        clf.save(tmp_path / "m")
        back = FERLClassifier.load(tmp_path / "m")
        assert back.novelty_discount is True
        np.testing.assert_array_equal(back.rule_prototypes_.discount, clf.rule_prototypes_.discount)
        np.testing.assert_array_equal(back.evidence(x[None]).ignorance, ev.ignorance)
    finally:
        clf.set_params(novelty_discount=False)
    assert clf.explain(x).reliability == 1.0


def test_an_input_no_leaf_reaches_stays_vacuous(fitted):
    clf, X, _ = fitted
    clf.set_params(novelty_discount=True)
    try:
        ev = clf.evidence(X[:3] + 10.0)
    finally:
        clf.set_params(novelty_discount=False)
    np.testing.assert_array_equal(ev.ignorance, 1.0)
    assert ev.abstain.all() and np.isfinite(ev.mass).all()


def test_a_bad_novelty_discount_is_refused(fitted):
    clf, X, _ = fitted
    clf.set_params(novelty_discount="nodes")
    try:
        with pytest.raises(ValueError, match="novelty_discount"):
            clf.evidence(X[:2])
    finally:
        clf.set_params(novelty_discount=False)


def test_interval_dominance_of_the_discounted_read_out_matches_the_formula(fitted):
    clf, _, _ = fitted
    X = _world(7, 100, shift=0.05)[0]
    clf.set_params(novelty_discount=True)
    try:
        ev = clf.evidence(X)
        sets = clf.predict_set(X)
    finally:
        clf.set_params(novelty_discount=False)
    np.testing.assert_array_equal(sets, interval_dominance(ev.mass, ev.ignorance))


def test_predict_and_the_explained_label_ignore_the_discount_even_where_r_underflows(fitted):
    """``BetP^r = r BetP + (1 - r) / C`` keeps the argmax of ``BetP`` only in exact arithmetic:
    an input far along a feature the rules do not gate (r ~ 1e-27 at 1e50, 0 further) got a
    uniform discounted BetP, hence the first class, while the undiscounted label was another."""
    clf, _, _ = fitted
    X = _world(8, 200)[0]
    X[:, 4] += np.repeat([1e50, 1e150, 1e300], [70, 70, 60])
    off = clf.predict(X)
    assert len(set(off.tolist())) > 1
    clf.set_params(novelty_discount=True)
    try:
        on = clf.predict(X)
        labels = [clf.explain(x).prediction for x in X[::20]]
        assert clf.evidence(X).abstain.all()  # the discount still makes every such input abstain
    finally:
        clf.set_params(novelty_discount=False)
    np.testing.assert_array_equal(on, off)
    assert labels == off[::20].tolist()


@pytest.mark.parametrize("valid, bad", [(True, 1), (True, 1.0), (False, 0), ("typical", np.str_("Typical"))])
def test_a_value_equal_to_the_last_checked_one_is_still_checked(fitted, valid, bad):
    """The inference-time check of the parameters is cached by value: ``1 == True`` let
    ``novelty_discount=1`` (refused by ``fit``) through once ``True`` had been checked."""
    clf, X, _ = fitted
    clf.set_params(novelty_discount=valid)
    try:
        clf.evidence(X[:2])
        clf.set_params(novelty_discount=bad)
        with pytest.raises(ValueError, match="novelty_discount"):
            clf.evidence(X[:2])
    finally:
        clf.set_params(novelty_discount=False)
