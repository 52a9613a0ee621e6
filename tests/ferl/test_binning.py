"""Feature binning of the learned split search (`ferl.tree.binning`)."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ferl.tree.binning import MAX_BINS, bin_features


def test_few_distinct_values_get_one_bin_each():
    x = np.array([[0.5, 0.1, 0.5, 0.9, 0.1, 0.1]])
    bins = bin_features(x, np.arange(6))
    assert bins.n_bins[0] == 3
    np.testing.assert_array_equal(bins.low[0, :3], [0.1, 0.5, 0.9])
    np.testing.assert_array_equal(bins.high[0, :3], [0.1, 0.5, 0.9])
    np.testing.assert_array_equal(bins.codes[0], [1, 0, 1, 2, 0, 0])
    assert bins.codes.dtype == np.uint8


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(300, 3000), heavy=st.floats(0.0, 0.6))
def test_many_distinct_values_get_ordered_bins_that_hold_their_rows(seed, n, heavy):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    x[rng.random(n) < heavy] = 0.0  # a heavy value, as clipping gives
    positive = np.flatnonzero(rng.random(n) < 0.9)
    bins = bin_features(x[None], positive)
    nb = bins.n_bins[0]
    low, high, codes = bins.low[0, :nb], bins.high[0, :nb], bins.codes[0]
    assert 1 <= nb <= MAX_BINS
    assert (low <= high).all() and (high[:-1] < low[1:]).all()
    xp, cp = x[positive], codes[positive]
    assert (low[cp] <= xp).all() and (xp <= high[cp]).all()
    assert set(np.unique(xp)) >= set(low) | set(high)  # bin edges are training values
    order = np.argsort(x, kind="stable")
    assert (np.diff(codes[order].astype(int)) >= 0).all()  # codes follow the values
    if len(np.unique(xp)) > MAX_BINS:
        counts = np.bincount(cp, minlength=nb)
        single = low == high
        assert counts[~single].max() <= 3 * len(xp) / MAX_BINS  # a heavy value is alone
