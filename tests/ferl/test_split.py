"""Split search: appendix A.1, eq. 1-2 (median cut and MAD width), fixed partitions."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ferl.tree.binning import bin_features
from ferl.tree.fuzzy_tree import membership
from ferl.tree.gains import (
    GAIN_CCI,
    GAIN_ENTROPY,
    GAIN_GINI,
    class_totals,
    plogp_sum,
    shoulder_gain,
    split_gain,
)
from ferl.tree.partitions import SET_NAMES, fixed_partitions
from ferl.tree.splitter import best_learned_split


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 10_000), n_classes=st.integers(2, 5),
       theta=st.floats(0.1, 0.9), h=st.floats(0.01, 0.5))
def test_fuzzy_gini_decrease_equals_alpha_one_minus_alpha_distance(seed, n_classes, theta, h):
    """Appendix A.1, eq. 6: G(p) - a G(pL) - (1-a) G(pR) = a (1-a) ||pL - pR||^2."""
    rng = np.random.default_rng(seed)
    n = 60
    x = rng.random(n)
    y = rng.integers(0, n_classes, n)
    w = rng.random(n) + 0.1
    mu = membership(x, -np.inf, -np.inf, theta - h, theta + h)
    wl = np.bincount(y, weights=w * mu, minlength=n_classes)
    wt = np.bincount(y, weights=w, minlength=n_classes)
    wr = wt - wl
    if wl.sum() < 1e-9 or wr.sum() < 1e-9:
        return
    gini = lambda q: 1.0 - np.sum((q / q.sum()) ** 2)  # noqa: E731
    alpha = wl.sum() / wt.sum()
    decrease = gini(wt) - alpha * gini(wl) - (1 - alpha) * gini(wr)
    closed = alpha * (1 - alpha) * np.sum((wl / wl.sum() - wr / wr.sum()) ** 2)
    assert decrease == pytest.approx(closed, abs=1e-12)
    assert decrease >= -1e-12
    got = split_gain(x, y.astype(np.int64), w, -np.inf, -np.inf, theta - h, theta + h,
                     n_classes, GAIN_GINI, wt.sum(), 0.0)
    assert got == pytest.approx(closed, abs=1e-12)


def test_cci_counts_correctly_classified_soft_mass():
    x = np.array([0.1, 0.2, 0.8, 0.9])
    y = np.array([0, 0, 1, 1], dtype=np.int64)
    w = np.ones(4)
    # crisp split at 0.5: both children pure -> correct mass goes from 2 to 4, gain (4-2)/4
    gain = split_gain(x, y, w, -np.inf, -np.inf, 0.5, 0.5, 2, GAIN_CCI, 4.0, 0.0)
    assert gain == pytest.approx(0.5)


def test_min_leaf_rejects_light_children():
    x = np.array([0.1, 0.2, 0.8, 0.9])
    y = np.array([0, 0, 1, 1], dtype=np.int64)
    gain = split_gain(x, y, np.ones(4), -np.inf, -np.inf, 0.15, 0.15, 2, GAIN_GINI, 4.0, 1.5)
    assert gain == -np.inf


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), criterion=st.sampled_from([GAIN_GINI, GAIN_CCI, GAIN_ENTROPY]),
       theta=st.floats(0.05, 0.95), h=st.floats(1e-3, 0.6), min_leaf=st.floats(1e-3, 5.0))
def test_the_shoulder_gain_is_the_trapezoids_bit_for_bit(seed, criterion, theta, h, min_leaf):
    """The split search's branch-free shoulder scores a node as `split_gain` does, to the last bit,
    with values on both edges of the band, inside it and outside, and a subset of the rows."""
    rng = np.random.default_rng(seed)
    n, n_local = 80, 4
    x = np.concatenate([rng.random(n - 4), [theta - h, theta + h, 0.0, 1.0]])
    rows = np.sort(rng.choice(n, 50, replace=False)).astype(np.int64)
    ys = rng.integers(0, n_local, rows.size).astype(np.int64)
    ws = rng.random(rows.size) + 0.01
    wt = class_totals(ys, ws, n_local)
    expected = split_gain(x[rows], ys, ws, -np.inf, -np.inf, theta - h, theta + h, n_local, criterion,
                          3.0, min_leaf)
    got = shoulder_gain(x, rows, ys, ws, wt, plogp_sum(wt), theta - h, theta + h, criterion, 3.0,
                        min_leaf)
    assert got == expected


def test_a_band_below_the_values_rounding_is_the_trapezoids_step():
    """A band narrower than the rounding of theta (``theta - h == theta + h``) is scored as a step."""
    x = np.array([0.2, 0.5, 0.5, 0.8])
    ys = np.array([0, 0, 1, 1], dtype=np.int64)
    ws = np.ones(4)
    rows = np.arange(4, dtype=np.int64)
    wt = class_totals(ys, ws, 2)
    expected = split_gain(x, ys, ws, -np.inf, -np.inf, 0.5, 0.5, 2, GAIN_GINI, 4.0, 0.0)
    got = shoulder_gain(x, rows, ys, ws, wt, 0.0, 0.5 - 1e-300, 0.5 + 1e-300, GAIN_GINI, 4.0, 0.0)
    assert got == expected
    assert np.isfinite(expected) and expected > 0


def test_a_band_wider_than_a_float_is_the_trapezoids():
    """``d - c`` overflowing (a band across the float range) is scored as the trapezoid, not NaN."""
    x = np.array([-1.7e308, -1.7e308, 0.0, 1.7e308])
    ys = np.array([0, 0, 1, 1], dtype=np.int64)
    ws = np.ones(4)
    rows = np.arange(4, dtype=np.int64)
    wt = class_totals(ys, ws, 2)
    for criterion in (GAIN_GINI, GAIN_CCI, GAIN_ENTROPY):
        expected = split_gain(x, ys, ws, -np.inf, -np.inf, -1.7e308, 1.7e308, 2, criterion, 4.0, 0.5)
        got = shoulder_gain(x, rows, ys, ws, wt, plogp_sum(wt), -1.7e308, 1.7e308, criterion, 4.0, 0.5)
        assert got == expected and np.isfinite(got)


def test_a_feature_closed_by_its_window_is_not_searched():
    """A window that leaves no cut between the feature's values closes it; the others still split."""
    X = np.column_stack([np.repeat([0.0, 1.0], 20), np.tile([0.0, 1.0], 20)])
    y = np.repeat([0, 1], 20).astype(np.int64)
    xt = np.ascontiguousarray(X.T)
    bins = bin_features(xt, np.arange(40))
    mult = np.ones((40, 3), dtype=np.uint8)
    rows = np.arange(40, dtype=np.int64)

    def search(window):
        return best_learned_split(bins.codes, bins.low, bins.high, bins.n_bins, xt, y, rows, np.ones(40),
                                  mult, 2, 2.0, np.full(2, 0.1), GAIN_GINI, 40.0, 1.0, window)

    open_ = np.tile([-np.inf, np.inf], (2, 1))
    assert search(open_)[0] == 0  # feature 0 separates the classes
    closed = open_.copy()
    closed[0] = [-np.inf, 0.05]  # cuts on feature 0 would have to lie below 0.05 - 0.1
    assert search(closed)[0] == 1
    closed[1] = [0.95, np.inf]
    assert search(closed)[0] == -1


def _search(X, y, w, mult, min_width, rows=None, width_factor=2.0, min_leaf=1.0):
    """`best_learned_split` on rows ``rows`` (default: all) with bins over all of X."""
    X = np.asarray(X, dtype=np.float64).reshape(len(y), -1)
    y = np.asarray(y, dtype=np.int64)
    rows = np.arange(len(y)) if rows is None else np.asarray(rows, dtype=np.int64)
    xt = np.ascontiguousarray(X.T)
    bins = bin_features(xt, np.arange(len(y)))
    w = np.asarray(w, dtype=np.float64)
    return best_learned_split(
        bins.codes, bins.low, bins.high, bins.n_bins, xt, y, rows, w[rows], np.ascontiguousarray(mult.T),
        int(y.max()) + 1, width_factor, np.asarray(min_width, dtype=np.float64), GAIN_GINI,
        float(w.sum()), min_leaf, np.tile([-np.inf, np.inf], (X.shape[1], 1)),
    )


def _multiplicities(n, n_boot, seed):
    rng = np.random.default_rng(seed)
    return np.stack([np.bincount(rng.integers(0, n, n), minlength=n)
                     for _ in range(n_boot)]).astype(np.uint16)


def _reference_cut(x, y, wb, n_classes):
    """Today's crisp cut, by brute force over the midpoints of consecutive distinct values."""
    xs = np.unique(x)
    best, best_cut = -1.0, np.nan
    for c in (xs[:-1] + xs[1:]) / 2:
        left = x <= c
        wl = np.bincount(y[left], weights=wb[left], minlength=n_classes)
        wr = np.bincount(y[~left], weights=wb[~left], minlength=n_classes)
        if wl.sum() <= 0 or wr.sum() <= 1e-12 * wb.sum():
            continue
        score = (wl**2).sum() / wl.sum() + (wr**2).sum() / wr.sum()
        if score > best * (1 + 1e-12):
            best, best_cut = score, c
    return best_cut


def _reference_split(X, y, w, mult, min_width, width_factor=2.0, min_leaf=1.0):
    """Slow reference of the learned split: per feature, the B crisp cuts, their median and MAD,
    the fuzzy gain on the raw values; the first feature with the largest gain."""
    n_classes = int(y.max()) + 1
    best = (-1, np.nan, np.nan, -np.inf)
    for f in range(X.shape[1]):
        cuts = np.array([_reference_cut(X[:, f], y, w * mult[b], n_classes)
                         for b in range(len(mult))])
        cuts = cuts[~np.isnan(cuts)]
        if len(cuts) == 0:
            continue
        theta = np.median(cuts)
        h = max(width_factor * np.median(np.abs(cuts - theta)), min_width[f])
        gain = split_gain(X[:, f], y, w, -np.inf, -np.inf, theta - h, theta + h, n_classes,
                          GAIN_GINI, w.sum(), min_leaf)
        if gain > best[3]:
            best = (f, theta, h, gain)
    return best


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), n_values=st.integers(2, 255), n_classes=st.integers(2, 6))
def test_binned_split_matches_the_sorted_search_on_few_distinct_values(seed, n_values, n_classes):
    """Parity: with at most 255 distinct values per feature the binned search returns today's
    split (per-sample sweep over the sorted values), on fuzzy (non-integer) node weights."""
    rng = np.random.default_rng(seed)
    n, d = 150, 4
    X = rng.integers(0, n_values, (n, d)) / max(n_values - 1, 1)
    y = (X[:, 0] + 0.5 * X[:, 1] + rng.normal(0, 0.3, n) > 0.7).astype(np.int64)
    y = np.where(rng.random(n) < 0.3, rng.integers(0, n_classes, n), y)
    w = rng.random(n) + 0.05
    mult = _multiplicities(n, 7, seed)
    min_width = np.full(d, 0.01)
    got = _search(X, y, w, mult, min_width)
    expected = _reference_split(X, y, w, mult, min_width)
    assert got[0] == expected[0]
    if expected[0] >= 0:
        assert got[1] == expected[1] and got[2] == expected[2]
        assert got[3] == pytest.approx(expected[3], rel=1e-9)


def test_theta_is_median_of_bootstrap_cuts_and_h_is_gamma_mad():
    rng = np.random.default_rng(0)
    x = np.round(np.concatenate([rng.normal(0.3, 0.1, 200), rng.normal(0.7, 0.1, 200)]), 2)
    y = np.repeat([0, 1], 200).astype(np.int64)
    mult = _multiplicities(len(x), 25, 1)
    w = np.ones(len(x))
    f, theta, h, gain = _search(x, y, w, mult, [1e-6])
    cuts = np.array([_reference_cut(x, y, mult[b].astype(float), 2) for b in range(25)])
    assert f == 0
    assert theta == np.median(cuts)
    assert h == pytest.approx(max(2.0 * np.median(np.abs(cuts - np.median(cuts))), 1e-6))
    assert 0.4 < theta < 0.6 and gain > 0


def test_zero_spread_uses_documented_minimum_width():
    x = np.array([0.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    y = np.array([0, 0, 0, 1, 1, 1], dtype=np.int64)
    mult = np.ones((5, 6), dtype=np.uint16)  # every resample the same: every cut at 0.5, MAD = 0
    f, theta, h, _ = _search(x, y, np.ones(6), mult, [0.01])
    assert theta == pytest.approx(0.5)
    assert h == pytest.approx(0.01)


def test_inactive_samples_do_not_move_the_cut():
    x = np.array([0.1, 0.2, 0.3, 0.6, 0.7, 5.0])
    y = np.array([0, 0, 1, 1, 1, 0], dtype=np.int64)
    mult = np.ones((3, 6), dtype=np.uint16)
    _, theta, _, _ = _search(x, y, np.ones(6), mult, [1e-6], rows=np.arange(5))
    assert theta == pytest.approx(0.25)


def test_exact_ties_go_to_the_lowest_cut():
    """Exact ties (integer bootstrap weights) go to the first cut, never to rounding noise: with
    one resample and a zero width the split is the exact-rational optimum."""
    rng = np.random.default_rng(0)
    for _ in range(300):
        m, n_classes = int(rng.integers(5, 40)), int(rng.integers(2, 6))
        x = rng.integers(0, 20, m) / 19.0
        y = rng.integers(0, n_classes, m).astype(np.int64)
        y[:2] = [0, 1]
        mult = np.floor(rng.random(m) * rng.integers(0, 4, m)).astype(np.uint16)[None]
        expected = _exact_best_cut(x, y, mult[0])
        _, theta, _, _ = _search(x, y, np.ones(m), mult, [0.0], min_leaf=0.0)
        assert theta == expected or (np.isnan(theta) and np.isnan(expected))


def _exact_best_cut(x, y, mult):
    """Slow reference in exact rationals: the first cut with the largest Gini score."""
    from fractions import Fraction

    order = np.argsort(x, kind="stable")
    xs, ys = x[order], y[order]
    total = [Fraction(int(v)) for v in np.bincount(ys, weights=mult[order])]
    w_total = sum(total)
    left = [Fraction(0)] * len(total)
    best, cut = None, np.nan
    for i in range(len(xs) - 1):
        left[ys[i]] += int(mult[order[i]])
        wl = sum(left)
        if xs[i] == xs[i + 1] or wl <= 0:
            continue
        if wl == w_total:
            break
        score = (sum(v * v for v in left) / wl
                 + sum((t - v) ** 2 for t, v in zip(total, left, strict=True)) / (w_total - wl))
        if best is None or score > best:
            best, cut = score, 0.5 * (xs[i] + xs[i + 1])
    return cut


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 1000))
def test_fixed_partitions_form_a_ruspini_partition(seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(200, 3))
    sets = fixed_partitions(X)
    assert sets.shape == (3, 3, 4)
    grid = np.linspace(-4, 4, 301)
    for f in range(3):
        total = sum(membership(grid, *sets[f, s]) for s in range(3))
        np.testing.assert_allclose(total, 1.0, atol=1e-12)
    assert SET_NAMES == ("low", "medium", "high")
