"""Split search: appendix A.1, eq. 1-2 (median cut and MAD width), fixed partitions."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ferl._partitions import SET_NAMES, fixed_partitions
from ferl._splitter import GAIN_CCI, GAIN_GINI, best_learned_split, split_gain
from ferl._tree import membership


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


def _bootstrap_inputs(x, y, n_boot, seed):
    rng = np.random.default_rng(seed)
    n = len(x)
    X = x.reshape(-1, 1).astype(np.float64)
    order = np.argsort(X, axis=0, kind="stable").T.copy()
    mult = np.stack([np.bincount(rng.integers(0, n, n), minlength=n) for _ in range(n_boot)])
    return X, order, mult.astype(np.float64)


def test_theta_is_median_of_bootstrap_cuts_and_h_is_gamma_mad():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(0.3, 0.1, 200), rng.normal(0.7, 0.1, 200)])
    y = np.repeat([0, 1], 200).astype(np.int64)
    X, order, mult = _bootstrap_inputs(x, y, 25, 1)
    w = np.ones(len(x))
    f, theta, h, gain = best_learned_split(X, y, w, order, mult, 2, 2.0, np.array([1e-6]),
                                           GAIN_GINI, w.sum(), 1.0)
    # reference: per-resample crisp Gini-optimal cut by brute force
    xs = np.sort(np.unique(x))
    mids = (xs[:-1] + xs[1:]) / 2
    cuts = []
    for b in range(25):
        wb = mult[b]
        best, best_cut = -1, None
        for c in mids:
            left = x <= c
            wl = np.bincount(y[left], weights=wb[left], minlength=2)
            wr = np.bincount(y[~left], weights=wb[~left], minlength=2)
            if wl.sum() == 0 or wr.sum() == 0:
                continue
            score = (wl**2).sum() / wl.sum() + (wr**2).sum() / wr.sum()
            if score > best + 1e-12:
                best, best_cut = score, c
        cuts.append(best_cut)
    cuts = np.array(cuts)
    assert f == 0
    assert theta == pytest.approx(np.median(cuts))
    assert h == pytest.approx(max(2.0 * np.median(np.abs(cuts - np.median(cuts))), 1e-6))
    assert 0.4 < theta < 0.6 and gain > 0


def test_zero_spread_uses_documented_minimum_width():
    x = np.array([0.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    y = np.array([0, 0, 0, 1, 1, 1], dtype=np.int64)
    X, order, mult = _bootstrap_inputs(x, y, 5, 0)
    mult[:] = 1.0  # every resample the same: every cut at 0.5, MAD = 0
    f, theta, h, _ = best_learned_split(X, y, np.ones(6), order, mult, 2, 2.0, np.array([0.01]),
                                        GAIN_GINI, 6.0, 1.0)
    assert theta == pytest.approx(0.5)
    assert h == pytest.approx(0.01)


def test_inactive_samples_do_not_move_the_cut():
    x = np.array([0.1, 0.2, 0.3, 0.6, 0.7, 5.0])
    y = np.array([0, 0, 1, 1, 1, 0], dtype=np.int64)
    X, order, mult = _bootstrap_inputs(x, y, 3, 0)
    mult[:] = 1.0
    w = np.array([1, 1, 1, 1, 1, 0.0])
    _, theta, _, _ = best_learned_split(X, y, w, order, mult, 2, 2.0, np.array([1e-6]),
                                        GAIN_GINI, 5.0, 1.0)
    assert theta == pytest.approx(0.25)


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


def _exact_best_cut(xs, ys, ws, n_classes):
    """Slow reference in exact rationals: the first cut with the largest Gini score."""
    from fractions import Fraction

    ws = [Fraction(int(v)) for v in ws]
    total = sum(ws)
    best, cut = None, np.nan
    for i in range(len(xs) - 1):
        if xs[i] == xs[i + 1]:
            continue
        left = [sum(ws[j] for j in range(i + 1) if ys[j] == k) for k in range(n_classes)]
        wl = sum(left)
        if wl <= 0:
            continue
        if wl == total:
            break
        right = [sum(ws[j] for j in range(i + 1, len(xs)) if ys[j] == k) for k in range(n_classes)]
        score = sum(v * v for v in left) / wl + sum(v * v for v in right) / (total - wl)
        if best is None or score > best:
            best, cut = score, 0.5 * (xs[i] + xs[i + 1])
    return cut


def test_crisp_cut_sweep_matches_exact_reference_and_breaks_ties_to_the_first_cut():
    """The O(1)-per-sample Gini sweep finds the exact optimum; exact ties (integer bootstrap
    weights) go to the lowest cut, never to rounding noise."""
    from ferl._splitter import _best_crisp_cut

    rng = np.random.default_rng(0)
    for _ in range(400):
        m, n_classes = int(rng.integers(5, 40)), int(rng.integers(2, 6))
        xs = np.sort(rng.integers(0, 20, m) / 19.0)
        ys = rng.integers(0, n_classes, m).astype(np.int64)
        ws = np.floor(rng.random(m) * rng.integers(0, 4, m))
        expected = _exact_best_cut(xs, ys, ws, n_classes)
        got = _best_crisp_cut(xs, ys, ws, n_classes)
        assert got == expected or (np.isnan(got) and np.isnan(expected))
