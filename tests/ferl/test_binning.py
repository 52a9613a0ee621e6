"""Feature binning of the learned split search (`ferl.tree.binning`)."""

import numpy as np
import pytest
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


def _reference_bins(xt, positive):
    """The binning by numpy's `unique` and `searchsorted`, feature by feature (the compiled
    `bin_features` must give the same codes and ranges)."""
    d, n = xt.shape
    codes = np.empty((d, n), dtype=np.uint8)
    low, high = np.full((d, MAX_BINS), np.nan), np.full((d, MAX_BINS), np.nan)
    n_bins = np.empty(d, dtype=np.int64)
    for f in range(d):
        values, counts = np.unique(xt[f, positive], return_counts=True)
        if len(counts) <= MAX_BINS:
            group = np.arange(len(counts))
        else:
            middle = 2 * np.cumsum(counts) - counts
            group = np.unique(middle * MAX_BINS // (2 * int(counts.sum())), return_inverse=True)[1]
        nb = int(group[-1]) + 1
        low[f, :nb] = values[np.searchsorted(group, np.arange(nb), side="left")]
        high[f, :nb] = values[np.searchsorted(group, np.arange(nb), side="right") - 1]
        n_bins[f] = nb
        codes[f] = np.minimum(np.searchsorted(high[f, :nb], xt[f], side="left"), nb - 1)
    return codes, low, high, n_bins


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 2000),
       n_values=st.sampled_from([2, 30, 255, 256, 10**6]), share=st.floats(0.05, 1.0))
def test_the_compiled_binning_is_numpys(seed, n, n_values, share):
    """Codes, bin ranges and bin counts equal numpy's `unique`-based binning, on few and many distinct
    values, heavy ties, a subset of positive rows and a feature-major view of a row-major X."""
    rng = np.random.default_rng(seed)
    X = rng.integers(0, n_values, (n, 3)) / n_values
    X[:, 2] = np.where(rng.random(n) < 0.5, 1.0, rng.normal(size=n))  # a bound rows pile on
    positive = np.flatnonzero(rng.random(n) < share)
    if positive.size == 0:
        positive = np.array([0])
    got = bin_features(X.T, positive)
    codes, low, high, n_bins = _reference_bins(X.T, positive)
    np.testing.assert_array_equal(got.codes, codes)
    np.testing.assert_array_equal(got.low, low)
    np.testing.assert_array_equal(got.high, high)
    np.testing.assert_array_equal(got.n_bins, n_bins)


@pytest.mark.parametrize("positive", [np.array([], dtype=np.int64), np.array([True, False, True, True]),
                                      np.array([0.0, 2.0])])
def test_positive_rows_must_be_integer_indices(positive):
    """A boolean mask (which indices 0 and 1 would read as rows) or no row at all is refused."""
    with pytest.raises(ValueError, match="integer row indices"):
        bin_features(np.array([[0.1, 0.5, 0.2, 0.9]]), positive)
