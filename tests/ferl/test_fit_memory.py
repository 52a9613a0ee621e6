"""The fit's memory-lean paths give the values of the plain ones (peak memory at
10^6 rows).

The training firing in exact-size int32 / one-float buffers, the copy-free moments, the feature
spread one feature at a time, the uint8 bootstrap multiplicities and the transposed view of X.
"""

import numpy as np
import pytest
from sklearn.datasets import make_classification

from ferl import FERLClassifier
from ferl._inputs import rescale_weights
from ferl.novelty.free_gaussians import standardisation as _standardisation
from ferl.novelty.free_gaussians import weighted_moments
from ferl.rules import fires_alone
from ferl.tree import builder
from ferl.tree.builder import GrowthSettings, _feature_spread, _Grower, _multiplicities


def _data(seed=0, n=600):
    X, y = make_classification(n_samples=n, n_features=6, n_informative=4, n_classes=3,
                               random_state=seed)
    rng = np.random.default_rng(seed)
    sw = rng.uniform(0.2, 3.0, size=n)
    sw[rng.random(n) < 0.1] = 0.0
    return X, y, sw


@pytest.mark.parametrize("kwargs", [{"variant": "deep"}, {"variant": "compact", "partition": "fixed"}])
def test_training_firing_holds_the_ungated_sparse_entries_in_exact_size_buffers(kwargs):
    X, y, sw = _data()
    tree = FERLClassifier(random_state=0, **kwargs).fit(X, y, sample_weight=sw).tree_
    ref = tree.sparse_firing(X, False, np.ones(tree.n_nodes))
    fired = tree.training_firing(X)
    np.testing.assert_array_equal(fired.count, ref.count)
    assert fired.rows.dtype == np.int32 and fired.rows.size == fired.phi0.size == ref.count.sum()
    np.testing.assert_array_equal(fired.start, np.concatenate([[0], np.cumsum(fired.count)[:-1]]))
    assert fired.phi is fired.phi0 and not fired.lost.any()
    for o in range(tree.n_nodes):
        a = slice(ref.start[o], ref.start[o] + ref.count[o])
        b = slice(fired.start[o], fired.start[o] + fired.count[o])
        np.testing.assert_array_equal(fired.rows[b], ref.rows[a])
        np.testing.assert_array_equal(fired.phi0[b], ref.phi0[a])  # bit for bit


def test_rule_shares_from_the_ungated_training_firing_equal_the_gated_ones():
    """The gates are 1 on the training rows of positive weight; rows of weight 0 (which may lie
    outside a node's observed range) do not count."""
    X, y, sw = _data(1)
    clf = FERLClassifier("deep", random_state=0).fit(X, y, sample_weight=sw)
    gated = clf.tree_.sparse_firing(X, True, clf._gate_margin())
    expected = fires_alone(gated, rescale_weights(sw)[0], clf.tree_.is_leaf)
    assert gated.phi.size > 0 and expected.sum() > 0.2
    np.testing.assert_array_equal(clf.rule_alone_, expected)


def test_weighted_moments_equal_numpys_weighted_average_bit_for_bit():
    rng = np.random.default_rng(2)
    X = rng.normal(3.0, 5.0, size=(1000, 4))
    sw = rng.uniform(0.0, 2.0, size=1000)
    shift, unit = rng.normal(size=4), rng.uniform(0.5, 2.0, size=4)
    mean, sd = weighted_moments(X, sw, shift, unit, sw.sum())
    V = (X - shift) / unit
    np.testing.assert_array_equal(mean, np.average(V, axis=0, weights=sw))
    np.testing.assert_array_equal(sd, np.sqrt(np.average((V - mean) ** 2, axis=0, weights=sw)))


def test_leaf_standardisation_reads_the_positive_weight_rows_only():
    X, _, sw = _data(3)
    center, scale = _standardisation(X, sw)
    keep = sw > 0
    np.testing.assert_allclose(center, np.average(X[keep], axis=0, weights=sw[keep]), rtol=1e-12)
    var = np.average((X[keep] - center) ** 2, axis=0, weights=sw[keep])
    np.testing.assert_allclose(scale, np.sqrt(var), rtol=1e-12)


def test_feature_spread_one_feature_at_a_time_equals_the_vectorised_percentiles():
    rng = np.random.default_rng(4)
    xt = rng.exponential(size=(5, 400))
    xt[2] = 1.0  # ties: the range
    xt[3, :390] = 0.0  # 1st and 99th percentiles tie: the range
    positive = np.flatnonzero(rng.random(400) < 0.8)
    for rows in (positive, np.arange(400)):
        sub = xt[:, rows]
        lo, hi = np.percentile(sub, (1.0, 99.0), axis=1)
        expected = np.where(hi > lo, hi - lo, sub.max(axis=1) - sub.min(axis=1))
        np.testing.assert_array_equal(_feature_spread(xt, rows), expected)


def test_feature_spread_in_blocks_of_features_is_the_same(monkeypatch):
    """Blocks of one, two or all features give the same spreads (a block's copy stays bounded)."""
    rng = np.random.default_rng(6)
    xt = rng.exponential(size=(7, 300))
    xt[4] = 2.0
    rows = np.flatnonzero(rng.random(300) < 0.7)
    whole = _feature_spread(xt, rows)
    for values in (1, 2 * rows.size, 3 * rows.size + 1):
        monkeypatch.setattr(builder, "_SPREAD_VALUES", values)
        np.testing.assert_array_equal(_feature_spread(xt, rows), whole)


class _SameRow:
    """A generator that always draws the first row."""

    def integers(self, low, high, size):
        return np.zeros(size, dtype=np.int64)


def test_multiplicities_are_bootstrap_counts_in_uint8_widened_when_a_row_is_drawn_over_255_times():
    positive = np.flatnonzero(np.arange(50) % 5 > 0)
    mult = _multiplicities(np.random.default_rng(5), positive, 50, 7)
    assert mult.dtype == np.uint8 and mult.shape == (50, 7)
    np.testing.assert_array_equal(mult.sum(axis=0), len(positive))
    assert not mult[::5].any()  # rows of weight 0 are never drawn
    many = _multiplicities(_SameRow(), np.arange(300), 300, 2)
    assert many.dtype == np.uint16 and many[0, 0] == many[0, 1] == 300 and not many[1:].any()


def test_the_grower_reads_x_through_a_view():
    X, y, sw = _data(6)
    settings = GrowthSettings("learned", "gini", 8, 4, 0.0, 0, 1.0, 5, 2.0, 0.05, False, 0.0)
    grower = _Grower(X, y.astype(np.int64), sw, 3, settings, np.random.default_rng(0), None)
    assert np.shares_memory(grower.xt, X) and grower.xt.shape == X.T.shape
