"""Tests for ferl.evidence.conformal: hand values and finite-sample coverage."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ferl.evidence.conformal import SplitConformal, aps_scores, conformal_quantile, raps_scores


def test_conformal_quantile_hand_values():
    s = np.arange(1.0, 10.0)  # n = 9
    assert conformal_quantile(s, 0.1) == 9.0  # k = ceil(10 * .9) = 9
    assert conformal_quantile(s, 0.5) == 5.0  # k = ceil(10 * .5) = 5
    assert conformal_quantile(s[::-1], 0.5) == 5.0  # order-free
    assert conformal_quantile(np.arange(5.0), 0.1) == math.inf  # k = 6 > n


def test_aps_scores_hand_values_and_ties():
    score, above = aps_scores(np.array([[0.5, 0.3, 0.2], [0.4, 0.4, 0.2]]))
    np.testing.assert_allclose(score, [[0.5, 0.8, 1.0], [0.8, 0.8, 1.0]])
    np.testing.assert_allclose(above, [[0.0, 0.5, 0.8], [0.0, 0.0, 0.8]])


def test_aps_sets_keep_crossing_class_and_ties_together():
    cp = SplitConformal(alpha=0.5, score="aps")
    cp.threshold_, cp.n_classes_ = 0.6, 3
    sets = cp.predict_set(np.array([[0.5, 0.3, 0.2], [0.4, 0.4, 0.2], [0.9, 0.05, 0.05]]))
    # row 0: above = 0, .5, .8 -> classes 0 and 1 (1 crosses .6); row 1: the tie enters together;
    # row 2: the top class is kept although its score .9 exceeds .6
    assert sets.tolist() == [[True, True, False], [True, True, False], [True, False, False]]


def test_lac_and_plausibility_sets_hand_values():
    cal = np.array([[0.8, 0.2], [0.3, 0.7], [0.6, 0.4]])
    y = np.array([0, 1, 1])  # scores 1 - p_y = .2, .3, .6 ; alpha .5 -> k = 2 -> q = .3
    lac = SplitConformal(alpha=0.5, score="lac").fit(cal, y)
    assert lac.threshold_ == pytest.approx(0.3)
    assert lac.predict_set(np.array([[0.75, 0.25], [0.5, 0.5]])).tolist() == [
        [True, False],
        [False, False],
    ]
    pl = SplitConformal(alpha=0.5, score="plausibility").fit(cal, y)
    # higher plausibility (more ignorance) widens the set
    assert pl.predict_set(np.array([[1.0, 0.8], [0.9, 0.2]])).tolist() == [
        [True, True],
        [True, False],
    ]


def _synthetic(rng: np.random.Generator, n: int, n_classes: int) -> tuple[np.ndarray, ...]:
    """Exchangeable (proba, label) pairs from a deliberately mis-calibrated model."""
    logits = rng.normal(size=(n, n_classes)) * 1.5
    proba = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    true_p = np.exp(0.8 * logits) / np.exp(0.8 * logits).sum(axis=1, keepdims=True)
    y = (true_p.cumsum(axis=1) < rng.random((n, 1))).sum(axis=1)
    return proba, np.minimum(y, n_classes - 1)


@pytest.mark.parametrize("score", ["aps", "raps", "lac", "plausibility"])
def test_finite_sample_coverage_over_seeds(score):
    alpha, n_cal, n_test = 0.1, 60, 400
    covs, sizes = [], []
    for seed in range(150):
        rng = np.random.default_rng(seed)
        proba, y = _synthetic(rng, n_cal + n_test, 4)
        if score == "plausibility":  # plausibility-like values: probabilities plus ignorance
            proba = np.minimum(1.0, proba + rng.uniform(0, 0.3, size=(proba.shape[0], 1)))
        cp = SplitConformal(alpha=alpha, score=score).fit(proba[:n_cal], y[:n_cal])
        sets = cp.predict_set(proba[n_cal:])
        covs.append(sets[np.arange(n_test), y[n_cal:]].mean())
        sizes.append(sets.sum(axis=1).mean())
    mean_cov = float(np.mean(covs))
    # standard error of the mean over 150 seeds is about 0.003
    assert mean_cov >= 1 - alpha - 0.01
    assert np.mean(sizes) < 3.9  # not the whole frame of 4 classes every time
    if score not in ("aps", "raps"):  # continuous scores: coverage also at most 1 - alpha + 1 / (n + 1)
        assert mean_cov <= 1 - alpha + 1 / (n_cal + 1) + 0.01


def test_deterministic_and_input_order_free():
    rng = np.random.default_rng(0)
    proba, y = _synthetic(rng, 200, 5)
    a = SplitConformal(score="aps").fit(proba[:100], y[:100]).predict_set(proba[100:])
    perm = rng.permutation(100)
    b = SplitConformal(score="aps").fit(proba[perm], y[perm]).predict_set(proba[100:])
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    "call",
    [
        lambda: SplitConformal().predict_set(np.full((1, 2), 0.5)),
        lambda: SplitConformal(alpha=1.5).fit(np.full((3, 2), 0.5), np.array([0, 1, 0])),
        lambda: SplitConformal(score="rapss").fit(np.full((3, 2), 0.5), np.array([0, 1, 0])),
        lambda: SplitConformal(score="raps", lam=-0.1).fit(np.full((3, 2), 0.5), np.array([0, 1, 0])),
        lambda: SplitConformal().fit(np.full((3, 2), np.nan), np.array([0, 1, 0])),
        lambda: SplitConformal().fit(np.full((3, 2), 0.5), np.array([0, 2, 0])),
        lambda: SplitConformal().fit(np.full((3, 2), 0.5), np.array([0, 1])),
        lambda: SplitConformal().fit(np.full((3, 2), 0.5), np.array([0, 1, 0])).predict_set(
            np.full((1, 3), 0.3)
        ),
        lambda: conformal_quantile(np.array([]), 0.1),
    ],
)
def test_bad_input_raises(call):
    with pytest.raises(ValueError):
        call()


def test_raps_hand_values_and_zero_penalty_is_aps():
    p = np.array([[0.5, 0.3, 0.2]])
    score, above = raps_scores(p, k_reg=1, lam=0.1)
    # ranks (ties included) 1, 2, 3: penalties 0, 0.1, 0.2 on the APS scores 0.5, 0.8, 1.0
    np.testing.assert_allclose(score, [[0.5, 0.9, 1.2]])
    np.testing.assert_allclose(above, [[0.0, 0.5, 0.9]])
    rng = np.random.default_rng(3)
    proba, y = _synthetic(rng, 300, 6)
    aps = SplitConformal(0.1, "aps").fit(proba[:150], y[:150]).predict_set(proba[150:])
    raps = SplitConformal(0.1, "raps", lam=0.0).fit(proba[:150], y[:150]).predict_set(proba[150:])
    np.testing.assert_array_equal(aps, raps)


def test_raps_penalty_shortens_the_long_sets():
    rng = np.random.default_rng(4)
    proba, y = _synthetic(rng, 2000, 10)
    sizes = {lam: SplitConformal(0.1, "raps", lam=lam).fit(proba[:1000], y[:1000]).predict_set(proba[1000:])
             .sum(axis=1) for lam in (0.0, 0.5)}
    assert sizes[0.5].max() < sizes[0.0].max()  # the penalty caps the sets past k_reg


def test_randomised_aps_and_raps_reach_the_target_where_the_deterministic_ones_over_cover():
    rng = np.random.default_rng(7)
    p = rng.dirichlet(np.full(40, 0.1), 4000)
    y = np.array([rng.choice(40, p=row) for row in p])
    for score in ("aps", "raps"):
        det = SplitConformal(0.1, score).fit(p[:2000], y[:2000]).predict_set(p[2000:])
        ran = SplitConformal(0.1, score, randomized=True).fit(p[:2000], y[:2000]).predict_set(p[2000:])
        cov = {k: s[np.arange(2000), y[2000:]].mean() for k, s in (("det", det), ("ran", ran))}
        assert abs(cov["ran"] - 0.9) < 0.03 and cov["det"] > cov["ran"]
        assert ran.sum(axis=1).mean() < det.sum(axis=1).mean() and ran.any(axis=1).all()
        again = SplitConformal(0.1, score, randomized=True).fit(p[:2000], y[:2000]).predict_set(p[2000:])
        np.testing.assert_array_equal(ran, again)  # seeded


def test_randomised_sets_with_empty_sets_allowed_cover_as_the_target_says():
    covs = []
    for seed in range(40):
        rng = np.random.default_rng(seed)
        proba, y = _synthetic(rng, 600, 6)
        cp = SplitConformal(0.1, "raps", randomized=True, random_state=seed, allow_empty=True)
        sets = cp.fit(proba[:300], y[:300]).predict_set(proba[300:])
        covs.append(sets[np.arange(300), y[300:]].mean())
    assert abs(np.mean(covs) - 0.9) < 0.015  # exact in expectation, where keeping the top class adds
