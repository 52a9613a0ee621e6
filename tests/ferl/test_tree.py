"""Fuzzy tree firing: appendix A.2 partition of unity and a slow reference for the numba kernel."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.datasets import make_classification

from ferl import FERLClassifier


def _fit(variant, seed):
    X, y = make_classification(n_samples=300, n_features=5, n_informative=3, n_classes=3,
                               random_state=seed)
    return FERLClassifier(variant, random_state=seed).fit(X, y), X


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 500), variant=st.sampled_from(["compact", "medium", "deep"]))
def test_leaf_firings_sum_to_one_with_gates_off(seed, variant):
    """Appendix A.2, eq. 7, on random inputs far inside and outside the training range."""
    clf, X = _fit(variant, seed)
    rng = np.random.default_rng(seed)
    Z = rng.normal(scale=5.0, size=(100, X.shape[1]))
    phi, lost = clf.tree_.firing(Z, gates=False, margin=clf._gate_margin())
    leaves = clf.tree_.is_leaf
    np.testing.assert_allclose(phi[:, leaves].sum(axis=1), 1.0, atol=1e-12)
    assert (lost == 0).all()


def _reference_firing(tree, x):
    phi = np.zeros(tree.n_nodes)
    phi[0] = 1.0
    for o in range(tree.n_nodes):
        f = tree.feature[o]
        if f < 0:
            continue
        a, b, c, d = tree.trap[o]
        v = x[f]
        if v < a:
            mu = 0.0
        elif v < b:
            mu = (v - a) / (b - a)
        elif v <= c:
            mu = 1.0
        elif v < d:
            mu = (d - v) / (d - c)
        else:
            mu = 0.0
        phi[tree.left[o]] = phi[o] * mu
        phi[tree.right[o]] = phi[o] * (1 - mu)
    return phi


@pytest.mark.parametrize("variant", ["compact", "deep"])
def test_numba_firing_matches_slow_reference(variant):
    clf, X = _fit(variant, 3)
    phi, _ = clf.tree_.firing(X[:50], gates=False, margin=clf._gate_margin())
    for i in range(50):
        np.testing.assert_allclose(phi[i], _reference_firing(clf.tree_, X[i]), atol=1e-14)


def test_children_follow_parents_and_depths_are_consistent():
    clf, _ = _fit("deep", 1)
    t = clf.tree_
    internal = np.flatnonzero(~t.is_leaf)
    assert (t.left[internal] > internal).all() and (t.right[internal] > internal).all()
    np.testing.assert_array_equal(t.depth[t.left[internal]], t.depth[internal] + 1)
    np.testing.assert_allclose(t.value.sum(axis=1), 1.0)
    assert t.depth.max() <= 12
    assert clf.n_rules_ == len(internal) + 1


def test_compact_never_retests_the_same_fuzzy_set_on_a_path():
    X, y = make_classification(n_samples=400, n_features=3, n_informative=3, n_redundant=0,
                               n_classes=3, random_state=0)
    clf = FERLClassifier("compact", random_state=0).fit(X, y)
    t = clf.tree_
    for leaf in np.flatnonzero(t.is_leaf):
        tests, node = [], leaf
        while t.parent[node] >= 0:
            node = t.parent[node]
            tests.append((t.feature[node], t.fuzzy_set[node]))
        assert len(tests) == len(set(tests)), tests
