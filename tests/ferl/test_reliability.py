"""The novelty discount's reliability below ``tau``: typical inputs are ranked, and barely moved."""

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ferl import FERLClassifier
from ferl.novelty.discount import TYPICAL_DISCOUNT, leaf_typicality, reliability

finite = st.floats(0.0, 50.0, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(tau=st.floats(1e-3, 10.0), width=st.floats(1e-3, 10.0),
       scores=st.lists(finite, min_size=2, max_size=20))
def test_reliability_is_a_decreasing_map_into_0_1_that_stays_near_1_up_to_tau(tau, width, scores):
    s = np.sort(np.asarray(scores))
    r = reliability(SimpleNamespace(reliability=np.array([tau, width])), s)
    assert ((r >= 0) & (r <= 1)).all()
    assert (np.diff(r) <= 0).all()
    assert (r[s <= tau] >= 1 - TYPICAL_DISCOUNT - 1e-12).all()
    below = s[s <= tau]
    if below.size >= 2 and below[-1] - below[0] > 1e-6 * tau:  # the slope ranks typical inputs
        assert r[s <= tau][0] > r[s <= tau][-1]
    at = reliability(SimpleNamespace(reliability=np.array([tau, width])), np.array([tau, tau * (1 + 1e-12)]))
    assert at[0] == pytest.approx(1 - TYPICAL_DISCOUNT, abs=1e-3)
    assert at[0] == pytest.approx(at[1], abs=1e-6)  # continuous at tau


def test_a_zero_tau_keeps_typical_sources_fully_reliable():
    r = reliability(SimpleNamespace(reliability=np.array([0.0, 1.0])), np.array([0.0, 1.0]))
    np.testing.assert_allclose(r, [1.0, np.exp(-1.0)])


def test_typical_inputs_ignorance_ranks_them_and_moves_by_at_most_delta():
    """Before: ``r = 1`` up to ``tau``, so 9 in 10 typical inputs kept the paper's ignorance exactly
    and the discounted ignorance could not tell a typical input from a novel one below ``tau``."""
    rng = np.random.default_rng(0)
    X = rng.random((500, 4))
    y = (X[:, 0] > 0.5).astype(int) + (X[:, 3] > 0.5)
    clf = FERLClassifier("deep", evidence_nodes="leaves", random_state=0).fit(X, y)
    Z = np.random.default_rng(1).random((300, 4))
    off = clf.evidence(Z).ignorance
    on = clf.set_params(novelty_discount="rules").evidence(Z).ignorance
    tau = clf.leaf_gaussians_.reliability[0]
    fired = clf.tree_.sparse_firing(Z, False, np.ones(clf.tree_.n_nodes))
    s = leaf_typicality(clf.tree_, clf.leaf_gaussians_, Z, fired)
    typical = (s <= tau).all(axis=1) & (off < 1.0)
    assert typical.mean() > 0.5
    moved = on[typical] - off[typical]
    assert (moved > 0).all()  # every typical input is ranked by its typicality: 0 before
    assert (moved <= TYPICAL_DISCOUNT + 1e-12).all()
    np.testing.assert_allclose(clf.evidence(Z).mass.sum(1) + on, 1.0)
