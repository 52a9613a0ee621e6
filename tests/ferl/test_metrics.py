"""Tests for ferl.metrics against hand-computed values on tiny examples."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from ferl import metrics as M

# Six samples: confidences strictly decreasing, correctness 1 1 0 1 0 0.
Y_TRUE = np.array([0, 1, 2, 0, 1, 2])
Y_PRED = np.array([0, 1, 0, 0, 2, 1])
CONF = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.4])


def test_accuracy_hand_value():
    assert M.accuracy(Y_TRUE, Y_PRED) == pytest.approx(3 / 6)
    assert M.accuracy(np.array(["a", "b"]), np.array(["a", "a"])) == pytest.approx(0.5)


def test_aurc_hand_value():
    # risks at k = 1..6: 0, 0, 1/3, 1/4, 2/5, 3/6
    expected = 100 * (0 + 0 + 1 / 3 + 1 / 4 + 2 / 5 + 3 / 6) / 6
    assert M.aurc(Y_TRUE, Y_PRED, CONF) == pytest.approx(expected)
    cov, risk = M.risk_coverage_curve(Y_TRUE, Y_PRED, CONF)
    np.testing.assert_allclose(cov, np.arange(1, 7) / 6)
    np.testing.assert_allclose(risk, [0, 0, 1 / 3, 1 / 4, 2 / 5, 1 / 2])


def test_aurc_ties_are_expected_value_and_order_free():
    # All tied: flat curve at the error rate.
    assert M.aurc(Y_TRUE, Y_PRED, np.full(6, 0.5)) == pytest.approx(50.0)
    # Two tied at the top (one error among them), then the rest.
    conf = np.array([0.9, 0.9, 0.5, 0.4, 0.3, 0.2])
    y_pred = np.array([0, 2, 2, 0, 2, 2])  # errors: sample 1 and sample 4
    _, risk = M.risk_coverage_curve(Y_TRUE, y_pred, conf)
    np.testing.assert_allclose(risk, [0.5 / 1, 1 / 2, 1 / 3, 1 / 4, 2 / 5, 2 / 6])
    perm = np.array([1, 0, 5, 3, 2, 4])
    assert M.aurc(Y_TRUE[perm], y_pred[perm], conf[perm]) == pytest.approx(
        M.aurc(Y_TRUE, y_pred, conf)
    )


def test_aurc_perfect_ranking_beats_reversed():
    assert M.aurc(Y_TRUE, Y_PRED, CONF) < M.aurc(Y_TRUE, Y_PRED, -CONF)


def test_ece_hand_value():
    proba = np.array(
        [[0.9, 0.1], [0.9, 0.1], [0.6, 0.4], [0.4, 0.6], [0.2, 0.8], [0.5, 0.5]]
    )
    y = np.array([0, 1, 0, 0, 1, 1])
    # conf .9 .9 .6 .6 .8 .5 ; correct 1 0 1 0 1 0 (argmax of [.5,.5] is class 0)
    # 5 bins of width .2: [.4,.6): {.5} acc 0; [.6,.8): {.6,.6} acc .5; [.8,1]: {.9,.9,.8} acc 2/3
    expected = (1 * 0.5 + 2 * abs(0.5 - 0.6) + 3 * abs(2 / 3 - (0.9 + 0.9 + 0.8) / 3)) / 6
    assert M.expected_calibration_error(y, proba, n_bins=5) == pytest.approx(expected)


def test_ece_perfectly_calibrated_is_zero():
    proba = np.array([[1.0, 0.0], [0.0, 1.0]])
    assert M.expected_calibration_error(np.array([0, 1]), proba) == pytest.approx(0.0)


SETS = np.array(
    [
        [True, False, False],  # y=0 hit, size 1
        [True, True, False],  # y=1 hit, size 2
        [True, True, True],  # y=2 hit, size 3
        [False, True, False],  # y=0 miss, size 1
        [False, False, False],  # y=1 miss, size 0
        [False, True, True],  # y=2 hit, size 2
    ]
)


def test_set_metrics_hand_values():
    assert M.coverage(Y_TRUE, SETS) == pytest.approx(4 / 6)
    assert M.determinacy(SETS) == pytest.approx(2 / 6)
    assert M.mean_set_size(SETS) == pytest.approx(9 / 6)
    u65_vals = [1.0, 1.6 / 2 - 0.6 / 4, 1.6 / 3 - 0.6 / 9, 0, 0, 1.6 / 2 - 0.6 / 4]
    u80_vals = [1.0, 2.2 / 2 - 1.2 / 4, 2.2 / 3 - 1.2 / 9, 0, 0, 2.2 / 2 - 1.2 / 4]
    assert M.u65(Y_TRUE, SETS) == pytest.approx(np.mean(u65_vals))
    assert M.u80(Y_TRUE, SETS) == pytest.approx(np.mean(u80_vals))
    assert u65_vals[1] == pytest.approx(0.65) and u80_vals[1] == pytest.approx(0.80)


@pytest.mark.parametrize(
    "call",
    [
        lambda: M.accuracy(np.array([]), np.array([])),
        lambda: M.accuracy(np.array([0, 1]), np.array([0])),
        lambda: M.aurc(Y_TRUE, Y_PRED, CONF[:5]),
        lambda: M.aurc(Y_TRUE, Y_PRED, np.r_[CONF[:5], np.nan]),
        lambda: M.expected_calibration_error(Y_TRUE, np.full((6, 2), np.nan)),
        lambda: M.expected_calibration_error(np.array([0, 3]), np.full((2, 2), 0.5)),
        lambda: M.expected_calibration_error(np.array([0, 1]), np.full((2, 2), 0.5), n_bins=0),
        lambda: M.coverage(Y_TRUE, SETS.astype(int)),
        lambda: M.coverage(Y_TRUE[:5], SETS),
        lambda: M.coverage(Y_TRUE, np.zeros((6, 0), dtype=bool)),
        lambda: M.utility_discounted_accuracy(Y_TRUE, SETS, "u99"),
        lambda: M.ood_auroc(np.array([]), np.array([1.0])),
        lambda: M.ood_auroc(np.array([0.1]), np.array([])),
        lambda: M.aupr_out(np.array([0.1, np.nan]), np.array([1.0])),
        lambda: M.fpr_at_95_tpr(np.array([0.1]), np.array([[1.0]])),
        lambda: M.fit_acceptance_threshold(np.array([])),
        lambda: M.fit_acceptance_threshold(np.array([1.0]), accept=0.0),
        lambda: M.rejection_rate(np.array([1.0]), float("nan")),
    ],
)
def test_bad_input_raises_value_error(call):
    with pytest.raises(ValueError):
        call()


# OOD: three in-distribution and three OOD scores.
S_ID = np.array([0.1, 0.4, 0.35])
S_OOD = np.array([0.8, 0.3, 0.9])


def test_ood_auroc_and_aupr_hand_values():
    # pairs (ood > id): 0.8 beats 3, 0.3 beats 1 (0.1), 0.9 beats 3 -> 7/9
    assert M.ood_auroc(S_ID, S_OOD) == pytest.approx(7 / 9)
    # ranking: .9(+) .8(+) .4 .35 .3(+) .1 -> AP = (1 + 1 + 3/5) / 3
    assert M.aupr_out(S_ID, S_OOD) == pytest.approx((1 + 1 + 3 / 5) / 3)


def test_wrong_direction_flips_auroc():
    assert M.ood_auroc(-S_ID, -S_OOD) == pytest.approx(1 - M.ood_auroc(S_ID, S_OOD))


def test_fpr95_hand_value():
    # k = ceil(.95 * 3) = 3 -> threshold = 3rd largest OOD score = 0.3; ID >= .3: .4, .35
    assert M.fpr_at_95_tpr(S_ID, S_OOD) == pytest.approx(2 / 3)
    # 20 OOD scores 1..20: k = 19 -> threshold 2; ID scores 1.5 and 2 -> only 2 counts
    assert M.fpr_at_95_tpr(np.array([1.5, 2.0]), np.arange(1.0, 21.0)) == pytest.approx(0.5)


def test_acceptance_threshold_and_rejection():
    val = np.arange(1.0, 21.0)  # 20 validation scores
    t = M.fit_acceptance_threshold(val, accept=0.95)
    assert t == 19.0  # accepts 19/20 = 95 %
    assert M.rejection_rate(val, t) == pytest.approx(0.05)
    assert M.rejection_rate(np.array([18.0, 19.0, 19.5, 30.0]), t) == pytest.approx(0.5)
    # 7 scores: ceil(.95 * 7) = 7 -> accept all
    assert M.fit_acceptance_threshold(np.arange(7.0)) == 6.0


finite = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False)


@settings(max_examples=60, deadline=None)
@given(
    arrays(float, st.integers(1, 20), elements=finite),
    arrays(float, st.integers(1, 20), elements=finite),
)
def test_property_auroc_flip_and_range(s_id, s_ood):
    a = M.ood_auroc(s_id, s_ood)
    assert 0.0 <= a <= 1.0
    assert M.ood_auroc(-s_id, -s_ood) == pytest.approx(1 - a)
    assert 0.0 <= M.fpr_at_95_tpr(s_id, s_ood) <= 1.0


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 25).flatmap(
        lambda n: st.tuples(
            arrays(np.int64, n, elements=st.integers(0, 2)),
            arrays(np.int64, n, elements=st.integers(0, 2)),
            arrays(float, n, elements=st.integers(0, 10).map(float)),  # ties likely
            st.randoms(use_true_random=False),
        )
    )
)
def test_property_aurc_permutation_and_monotone_invariance(args):
    y, p, conf, rnd = args
    value = M.aurc(y, p, conf)
    assert 0.0 <= value <= 100.0
    perm = np.array(rnd.sample(range(y.size), y.size))
    assert M.aurc(y[perm], p[perm], conf[perm]) == pytest.approx(value)
    assert M.aurc(y, p, 3 * conf + 1) == pytest.approx(value)  # strictly increasing transform
    # With no informative ordering the area is the error rate.
    assert M.aurc(y, p, np.zeros_like(conf)) == pytest.approx(100 * (1 - M.accuracy(y, p)))


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 15).flatmap(
        lambda n: st.tuples(
            arrays(np.int64, n, elements=st.integers(0, 3)),
            arrays(bool, (n, 4)),
        )
    )
)
def test_property_utility_ordering(args):
    y, sets = args
    cov, a65, a80 = M.coverage(y, sets), M.u65(y, sets), M.u80(y, sets)
    assert 0.0 <= a65 <= a80 + 1e-12 <= cov + 1e-12
    singleton = sets.sum(axis=1) == 1
    if singleton.all():
        assert a65 == pytest.approx(cov) and a80 == pytest.approx(cov)
