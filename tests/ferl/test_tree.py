"""Fuzzy tree firing: appendix A.2 partition of unity and a slow reference for the numba kernel."""

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from sklearn.datasets import load_wine, make_classification

from ferl import FERLClassifier
from ferl.tree.firing import _membership, is_ramp
from ferl.tree.membership import trapezoid


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
    clf = FERLClassifier("compact", partition="fixed", random_state=0).fit(X, y)
    t = clf.tree_
    for leaf in np.flatnonzero(t.is_leaf):
        tests, node = [], leaf
        while t.parent[node] >= 0:
            node = t.parent[node]
            tests.append((t.feature[node], t.fuzzy_set[node]))
        assert len(tests) == len(set(tests)), tests


# ---------------------------------------------------------------------------- growth policy


def _paths(tree):
    """For each leaf, its ancestors from the root down as (node, went_left) pairs."""
    for leaf in np.flatnonzero(tree.is_leaf):
        path, node = [], leaf
        while tree.parent[node] >= 0:
            parent = tree.parent[node]
            path.append((parent, tree.left[parent] == node))
            node = parent
        yield path[::-1]


def _chain_reproducer():
    """Clean 50-class concept vectors on which weighted Gini grows a chain."""
    rng = np.random.default_rng(0)
    k = 50
    y = np.repeat(np.arange(k), 24)
    A = np.hstack([(rng.random((k, 30)) < 0.3), np.eye(k)]).astype(float)
    return np.clip(A[y] + rng.normal(0, 0.02, (len(y), A.shape[1])), 0, 1), y


@pytest.mark.parametrize("variant", ["deep", "medium"])
def test_clean_many_class_concepts_do_not_grow_a_chain(variant):
    # Before: Gini gave every clean split the same gain, growth peeled one class per level and the
    # depth limit stopped the tree at 37 (deep) / 14 (medium) rules, 0.74 / 0.28 train accuracy.
    X, y = _chain_reproducer()
    clf = FERLClassifier(variant, random_state=0).fit(X, y)
    assert np.mean(clf.predict(X) == y) >= 0.99
    assert clf.tree_.depth.max() <= 8  # balanced: log2(50) < 6 levels would do


def test_information_gain_prefers_the_balanced_clean_split():
    # Four equally weighted classes; feature 0 peels class 0 off, feature 1 halves {0,1} | {2,3}.
    # Both splits are clean, so weighted Gini ties (1/4 each); the root must take the halving one.
    y = np.repeat(np.arange(4), 50)
    X = np.stack([(y == 0), (y >= 2)], axis=1).astype(float)
    clf = FERLClassifier("deep", max_rules=2, random_state=0).fit(X, y)
    assert clf.tree_.feature[0] == 1


@pytest.mark.parametrize("variant", ["medium", "deep"])
def test_no_path_cuts_a_feature_again_inside_a_band_it_used(variant):
    # regression: medium on wine printed "x9 > 3.44 +- 0.59 AND x9 <= 3.44 +- 0.59", a rule that
    # lives only inside the fuzzy band of one cut; then "x12 is between 584.23 and 787.27
    # (membership <= 0.70)", a later band across an earlier one.
    X, y = load_wine(return_X_y=True)
    tree = FERLClassifier(variant, random_state=0).fit(X, y).tree_
    band = tree.threshold[:, None] + np.outer(tree.half_width, [-1.0, 1.0])
    tol = 1e-9 * (X.max(axis=0) - X.min(axis=0))
    for path in _paths(tree):
        for i, (a, _) in enumerate(path):
            later = [b for b, _ in path[i + 1:] if tree.feature[b] == tree.feature[a]]
            f = tree.feature[a]
            assert all(band[b, 1] <= band[a, 0] + tol[f] or band[b, 0] >= band[a, 1] - tol[f]
                       for b in later), (a, later)


def test_compact_closes_a_feature_after_f_is_s():
    # Low / medium / high form a Ruspini partition: after "f is S" any other set of f meets the
    # path only inside fuzzy bands, so f is never tested again below the "is" branch.
    X, y = make_classification(n_samples=600, n_features=3, n_informative=3, n_redundant=0,
                               n_classes=3, random_state=0)
    tree = FERLClassifier("compact", partition="fixed", prune=False, random_state=0).fit(X, y).tree_
    for path in _paths(tree):
        closed = set()
        for node, went_left in path:
            assert tree.feature[node] not in closed
            if went_left:
                closed.add(tree.feature[node])


def _hand_tree():
    """Root on x0; its left child on x1 has two leaves predicting class 0; right leaf class 1."""
    from ferl.tree.fuzzy_tree import FuzzyTree

    tree = FuzzyTree(n_classes=2)
    value = {0: [0.5, 0.5], 1: [0.9, 0.1], 2: [0.1, 0.9], 3: [0.95, 0.05], 4: [0.8, 0.2]}
    parent = {0: -1, 1: 0, 2: 0, 3: 1, 4: 1}
    for o in range(5):
        tree.add_node(parent[o], 0 if o == 0 else (1 if o < 3 else 2), np.array(value[o]), 10.0)
    for o, f, children in ((0, 0, (1, 2)), (1, 1, (3, 4))):
        tree.feature[o], tree.kind[o] = f, 0
        tree.left[o], tree.right[o] = children
        tree.trap[o] = np.array([-np.inf, -np.inf, 0.4, 0.6])
        tree.threshold[o], tree.half_width[o], tree.lo[o], tree.hi[o], tree.gain[o] = .5, .1, 0, 1, .1
    return tree.finalize()


def test_pruning_undoes_splits_whose_leaves_agree_and_reindexes_the_tree():
    from ferl.tree.pruning import cost_complexity_prune

    tree = cost_complexity_prune(_hand_tree(), 0.0)
    assert tree.n_nodes == 3
    np.testing.assert_array_equal(tree.feature, [0, -1, -1])
    np.testing.assert_array_equal(tree.left, [1, -1, -1])
    np.testing.assert_array_equal(tree.right, [2, -1, -1])
    np.testing.assert_array_equal(tree.parent, [-1, 0, 0])
    np.testing.assert_allclose(tree.value[1], [0.9, 0.1])  # the merged node keeps its mixture
    np.testing.assert_array_equal(tree.depth, [0, 1, 1])
    assert np.isnan(tree.threshold[1]) and np.isnan(tree.trap[1]).all() and tree.kind[1] == -1


def test_cost_complexity_pruning_undoes_the_weakest_link_while_it_saves_at_most_alpha_per_rule():
    from ferl.tree.fuzzy_tree import FuzzyTree
    from ferl.tree.pruning import cost_complexity_prune

    # Root (weight 40) -> node 1 (20) and leaf 2 (20, class 1 at 0.9); node 1 -> leaves 3 (10, class 0
    # at 0.95) and 4 (10, class 1 at 0.6); every parent is the mixture of its children.
    tree = FuzzyTree(n_classes=2)
    rows = ((-1, 0, [0.3875, 0.6125], 40.0), (0, 1, [0.675, 0.325], 20.0), (0, 1, [0.1, 0.9], 20.0),
            (1, 2, [0.95, 0.05], 10.0), (1, 2, [0.4, 0.6], 10.0))
    for parent, depth, value, weight in rows:
        tree.add_node(parent, depth, np.array(value), weight)
    for o, children in ((0, (1, 2)), (1, (3, 4))):
        tree.feature[o], tree.kind[o], (tree.left[o], tree.right[o]) = o, 0, children
        tree.trap[o] = np.array([-np.inf, -np.inf, 0.4, 0.6])
        tree.threshold[o], tree.half_width[o], tree.lo[o], tree.hi[o], tree.gain[o] = .5, .1, 0, 1, .1
    tree = tree.finalize()
    # Soft errors (weight misclassified / 40): node 1 as a leaf 6.5 / 40, its leaves (0.5 + 4) / 40,
    # so node 1's split saves 0.05 per rule; then the root's split saves (15.5 - 8.5) / 40 = 0.175.
    assert cost_complexity_prune(tree, 0.0) is tree
    assert cost_complexity_prune(tree, 0.049).n_nodes == 5
    pruned = cost_complexity_prune(tree, 0.05)
    np.testing.assert_array_equal(pruned.feature, [0, -1, -1])
    np.testing.assert_allclose(pruned.value[1], [0.675, 0.325])
    assert cost_complexity_prune(tree, 0.174).n_nodes == 3
    assert cost_complexity_prune(tree, 0.176).n_nodes == 1


def test_compact_prunes_until_sibling_leaves_disagree():
    X, y = load_wine(return_X_y=True)
    full = FERLClassifier("compact", prune=False, random_state=0).fit(X, y)
    clf = FERLClassifier("compact", random_state=0).fit(X, y)
    t = clf.tree_
    assert clf.n_rules_ < full.n_rules_
    for o in np.flatnonzero(~t.is_leaf):
        kids = [t.left[o], t.right[o]]
        if t.is_leaf[kids].all():
            assert np.argmax(t.value[kids[0]]) != np.argmax(t.value[kids[1]])
    assert np.mean(clf.predict(X) == full.predict(X)) >= 0.95


def test_budget_follows_the_number_of_classes_unless_given():
    from ferl.presets import growth_settings

    budget = {v: growth_settings(FERLClassifier(v), 150, 1.0, 10).max_rules
              for v in ("compact", "medium", "deep")}
    assert budget == {"compact": 15, "medium": 150, "deep": 600}
    assert growth_settings(FERLClassifier("deep"), 10, 1.0, 10).max_rules == 200
    assert growth_settings(FERLClassifier("deep", max_rules=200), 150, 1.0, 10).max_rules == 200


def test_band_floor_follows_the_bulk_of_a_skewed_feature():
    # 99.5 % of the values in [0, 0.05], a few outliers up to 1: a floor of 5 % of the range would
    # make every cut in the bulk a band covering the whole bulk.
    rng = np.random.default_rng(0)
    x = np.where(rng.random(2000) < 0.995, rng.random(2000) * 0.05, rng.random(2000))
    y = (x > 0.025).astype(int)
    clf = FERLClassifier("deep", max_rules=2, random_state=0).fit(x[:, None], y)
    assert clf.tree_.half_width[0] < 0.01  # 0.047 with 5 % of the range
    assert np.mean(clf.predict(x[:, None]) == y) >= 0.99  # 0.952 with 5 % of the range


def test_kernels_see_the_learned_splits_infinite_shoulders():
    # np.nan_to_num had turned -inf into -1.8e308, so no learned split took the firing's
    # branch-free path (`is_ramp`), and routing 10^5 rows cost 32 ms instead of 19 ms
    clf, _ = _fit("deep", 0)
    tree = clf.tree_
    lo, hi, trap = tree.kernel_arrays()
    internal = tree.feature >= 0
    assert np.all(trap[internal, :2] == -np.inf)
    assert all(is_ramp(*trap[o]) for o in np.flatnonzero(internal) if trap[o, 2] < trap[o, 3])
    assert not np.isnan(lo).any() and not np.isnan(hi).any() and not np.isnan(trap).any()
    np.testing.assert_array_equal(lo[internal], tree.lo[internal])


finite = st.floats(-1.7e308, 1.7e308, allow_nan=False, allow_infinity=False)


@settings(max_examples=300, deadline=None)
@given(x=finite, c=finite, d=finite)
@example(x=8.98846567431158e+307, c=8.988465674311579e+307, d=1.7e308)  # d - x, d - c near overflow
@example(x=-1e308, c=-1.7e308, d=1.7e308)  # d - c overflows: the trapezoid's own inf / inf
@example(x=1.0, c=1.0, d=1.0)  # crisp split
@example(x=5e-324, c=0.0, d=1e-323)  # subnormal band
@example(x=-0.0, c=-1e-323, d=0.0)
def test_branch_free_shoulder_is_the_trapezoids_float(x, c, d):
    # d = c + |width| could overflow to inf, a split no model holds (`ferl.io.model_files` rejects
    # an infinite end that is no shoulder): (inf - x) / (inf - c) is NaN on both paths, so the test
    # failed about once in 20,000 examples
    c, d = min(c, d), max(c, d)
    ramp = is_ramp(-np.inf, -np.inf, c, d)
    assert ramp == (c < d and d - c < np.inf)
    got = _membership(x, -np.inf, -np.inf, c, d, ramp)
    want = trapezoid(x, -np.inf, -np.inf, c, d)
    if d - c < np.inf:  # a band a model can hold
        assert got == want and np.copysign(1.0, got) == 1.0  # no -0.0, no NaN
    else:
        assert not ramp and (got == want or (np.isnan(got) and np.isnan(want)))
