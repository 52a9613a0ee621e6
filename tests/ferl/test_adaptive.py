"""Tests for ferl.evidence.adaptive: the shift-adaptive plausibility sets and their Shafer discount."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ferl.evidence.adaptive import ShiftAdaptiveSets, plausibility_set, true_class_nll
from ferl.evidence.algebra import Evidence, discount_evidence
from ferl.evidence.conformal import conformal_quantile


def _world(rng, n, shift):
    """Rows whose true class loses plausibility as their shift score grows: -log Pl_y ~ Exp(1 + z)."""
    z = rng.uniform(0, shift, n) if shift else rng.normal(0, 0.3, n)
    return rng.exponential(1.0 + np.maximum(z, 0.0)), z


def _fitted(seed=0, coverage=0.9):
    rng = np.random.default_rng(seed)
    return ShiftAdaptiveSets(coverage).fit(*_world(rng, 400, 0), *_world(rng, 3000, 4.0))


def test_widening_grows_with_the_score_and_only_widens():
    sets = _fitted()
    assert np.all(np.diff(sets.widening_) >= 0) and sets.widening_.min() >= 0
    assert sets.widening([3.5])[0] > sets.widening([0.0])[0] + 1.0  # the far rows need much wider sets
    assert sets.widening_[0] == 0.0  # the least shifted rows are not widened
    r = sets.reliability(np.linspace(-1, 5, 50))
    assert np.all((r > 0) & (r <= 1)) and np.all(np.diff(r) <= 1e-12) and r[0] == 1.0


def test_the_clean_rows_are_covered_as_split_conformal_counts():
    rng = np.random.default_rng(1)
    nll, z = _world(rng, 200, 0)
    sets = ShiftAdaptiveSets(0.9).fit(nll, z, *_world(rng, 2000, 4.0))
    covered = nll <= sets.threshold(z)
    assert covered.sum() >= math.ceil(0.9 * 201)  # the level is the k-th smallest of nll - b(z)


def test_coverage_holds_under_the_calibration_shift_where_a_clean_threshold_fails():
    sets = _fitted(seed=2)
    rng = np.random.default_rng(12)
    nll, z = _world(rng, 20000, 4.0)  # new rows of the same shift
    adaptive = (nll <= sets.threshold(z)).mean()
    clean = (nll <= conformal_quantile(_world(rng, 400, 0)[0], 0.1)).mean()
    assert adaptive >= 0.87 and clean < 0.75


def test_without_shifted_rows_it_is_the_paper_set():
    rng = np.random.default_rng(3)
    nll, z = _world(rng, 150, 0)
    sets = ShiftAdaptiveSets(0.8).fit(nll, z, None, None)
    assert sets.level_ == conformal_quantile(nll, 0.2)
    np.testing.assert_array_equal(sets.reliability(z), 1.0)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(2, 7))
def test_the_threshold_falls_by_the_reliability_and_the_shift_only_adds_ignorance(seed, n_classes):
    sets = _fitted(seed % 7)
    rng = np.random.default_rng(seed)
    mass = rng.dirichlet(np.ones(n_classes + 1), 30)
    ev = Evidence(mass=mass[:, :-1], ignorance=mass[:, -1], conflict=np.zeros(30))
    score = np.sort(rng.uniform(-1, 5, 30))
    r = sets.reliability(score)
    np.testing.assert_allclose(np.exp(-sets.threshold(score)), np.exp(-sets.level_) * r)
    S = sets.predict_set(ev.plausibility, score)
    np.testing.assert_array_equal(S, plausibility_set(ev.plausibility, np.exp(-sets.level_) * r))
    same = np.repeat(ev.plausibility[:1], 30, axis=0)  # one input at ever larger shift scores
    grown = sets.predict_set(same, score)
    assert np.all(grown[1:] >= grown[:-1])  # nested: a class that entered stays in
    discounted = discount_evidence(ev, r)
    assert np.all(discounted.ignorance >= ev.ignorance - 1e-12)
    np.testing.assert_array_equal(discounted.pignistic.argmax(axis=1), ev.pignistic.argmax(axis=1))


def test_true_class_nll_and_plausibility_set_hand_values():
    pl = np.array([[0.5, 0.25, 0.0], [0.1, 0.2, 0.9]])
    np.testing.assert_allclose(true_class_nll(pl, np.array([1, 2])), [math.log(4), -math.log(0.9)])
    assert np.isfinite(true_class_nll(pl, np.array([2, 0]))).all()  # a zero plausibility stays finite
    np.testing.assert_array_equal(plausibility_set(pl, 0.3), [[True, False, False], [False, False, True]])
    np.testing.assert_array_equal(plausibility_set(pl, np.array([0.2, 0.95])),
                                  [[True, True, False], [False, False, True]])  # the top class always


def test_round_trip_and_damaged_state():
    sets = _fitted()
    again = ShiftAdaptiveSets.from_dict(sets.to_dict())
    score = np.linspace(-1, 6, 40)
    np.testing.assert_array_equal(again.threshold(score), sets.threshold(score))
    doc = sets.to_dict()
    for bad in ({**doc, "widening": doc["widening"][::-1] if doc["widening"][0] != doc["widening"][-1]
                 else [-1.0] * len(doc["widening"])}, {**doc, "knots": [0.0] * len(doc["knots"])},
                {**doc, "coverage": 1.5}, {k: v for k, v in doc.items() if k != "level"}):
        with pytest.raises(ValueError, match="shift-adaptive sets"):
            ShiftAdaptiveSets.from_dict(bad)


@pytest.mark.parametrize("call", [
    lambda: ShiftAdaptiveSets(1.0).fit([1.0], [0.0], None, None),
    lambda: ShiftAdaptiveSets(0.9, n_bins=0).fit([1.0], [0.0], None, None),
    lambda: ShiftAdaptiveSets(0.9).fit([1.0, np.nan], [0.0, 1.0], None, None),
    lambda: ShiftAdaptiveSets(0.9).fit([1.0], [0.0, 1.0], None, None),
    lambda: ShiftAdaptiveSets(0.9).fit([1.0], [0.0], [1.0, 2.0], [np.inf, 0.0]),
    lambda: ShiftAdaptiveSets(0.9).threshold([0.0]),
    lambda: _fitted().widening([np.nan]),
])
def test_bad_input_raises(call):
    with pytest.raises(ValueError):
        call()
