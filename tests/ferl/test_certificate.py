"""Robustness certificate (paper appendix A.3, eqs. 9-12)."""

import numpy as np
import pytest
from sklearn.datasets import load_wine
from sklearn.preprocessing import MinMaxScaler

from ferl import FERLClassifier
from ferl._inputs import feature_domain
from ferl.tree.certificate import lipschitz_constant, robustness_radius, tree_probability
from ferl.tree.fuzzy_tree import SPLIT_LEARNED, FuzzyTree


def _learned(tree, node, feature, theta, h, lo, hi):
    tree.feature[node], tree.kind[node] = feature, SPLIT_LEARNED
    tree.trap[node] = np.array([-np.inf, -np.inf, theta - h, theta + h])
    tree.threshold[node], tree.half_width[node] = theta, h
    tree.lo[node], tree.hi[node] = lo, hi


def _hand_tree():
    """root: x0 <= 0.5 +- 0.1 -> leaf [1, 0]; else x1 <= 0.3 +- 0.05 -> [0.2, 0.8] / [0.5, 0.5]."""
    t = FuzzyTree(n_classes=2)
    t.add_node(-1, 0, [0.6, 0.4], 10.0)
    t.left[0] = t.add_node(0, 1, [1.0, 0.0], 5.0)
    t.right[0] = t.add_node(0, 1, [0.3, 0.7], 5.0)
    _learned(t, 0, 0, 0.5, 0.1, 0.0, 1.0)
    t.left[2] = t.add_node(2, 2, [0.2, 0.8], 3.0)
    t.right[2] = t.add_node(2, 2, [0.5, 0.5], 2.0)
    _learned(t, 2, 1, 0.3, 0.05, 0.0, 1.0)
    return t.finalize()


def _radius(tree, X, gates=True):
    X = np.asarray(X, dtype=float)
    phi, lost = tree.firing(X, gates, np.ones(tree.n_nodes))  # margin 1 = node range [0, 1]
    return robustness_radius(tree, X, phi, lost, gates)


def test_lipschitz_constant_is_the_largest_path_sum_of_inverse_half_widths():
    assert lipschitz_constant(_hand_tree()) == pytest.approx(1 / 0.1 + 1 / 0.05)


def test_radius_on_a_hand_built_tree():
    t = _hand_tree()
    X = [[0.2, 0.5],    # leaf [1, 0] only: Delta = 1 -> 1 / (2 * 30)
         [0.98, 0.5],   # leaf [0.5, 0.5]: tied top class -> 0
         [0.98, 0.1],   # leaf [0.2, 0.8]: Delta = 0.6 -> 0.01, gate slack 0.02
         [0.995, 0.1],  # same, but the root range ends 0.005 away: capped
         [1.05, 0.1],   # root gate active -> 0
         [0.55, 0.1]]   # inside the root ramp: P = 0.25 [1, 0] + 0.75 [0.2, 0.8]
    expected_p = 0.25 * np.array([1.0, 0.0]) + 0.75 * np.array([0.2, 0.8])
    delta = expected_p[1] - expected_p[0]
    np.testing.assert_allclose(_radius(t, X), [1 / 60, 0.0, 0.01, 0.005, 0.0, delta / 60], atol=1e-12)
    np.testing.assert_allclose(_radius(t, X, gates=False)[3:5], [0.01, 0.01])  # no gates, no cap


def test_radius_is_half_the_distance_to_the_flip_on_a_single_ramp():
    """One split with pure leaves: P_T = (mu, 1 - mu) flips at theta, and eq. 12 certifies
    |x - theta| / 2 (capped by the distance to the node's observed range): a step of twice the
    radius towards theta flips the class."""
    rng = np.random.default_rng(0)
    x = rng.random((400, 1))
    y = (x[:, 0] + 0.15 * rng.normal(size=400) > 0.5).astype(int)
    clf = FERLClassifier("deep", max_rules=2, width_factor=8.0, random_state=0).fit(x, y)
    t = clf.tree_
    t.value[t.left[0]], t.value[t.right[0]] = [1.0, 0.0], [0.0, 1.0]
    theta, h, lo, hi = t.threshold[0], t.half_width[0], t.lo[0], t.hi[0]
    assert 0.05 < h < 0.5 * min(theta - lo, hi - theta)
    inside = np.linspace(theta - 0.9 * h, theta + 0.9 * h, 10)[:, None]
    radius = clf.robustness_radius(inside)
    np.testing.assert_allclose(radius, np.abs(inside[:, 0] - theta) / 2, rtol=1e-9)
    edge = np.array([[lo + 0.001], [hi - 0.002]])  # far from theta but near the range ends
    np.testing.assert_allclose(clf.robustness_radius(edge), [0.001, 0.002], rtol=1e-6)

    def p_class(z):
        return tree_probability(clf._firing(z)[0], t).argmax(axis=1)

    toward = inside + np.sign(theta - inside) * (2 * radius[:, None] + 1e-6)
    assert (p_class(toward) != p_class(inside)).all()
    below = inside + np.sign(theta - inside) * (0.999 * radius[:, None])
    assert (p_class(below) == p_class(inside)).all()


@pytest.mark.parametrize("variant, width", [("medium", 2.0), ("deep", 10.0)])
def test_perturbations_below_the_radius_never_change_the_class_of_p_t(variant, width):
    X, y = load_wine(return_X_y=True)
    X = MinMaxScaler().fit_transform(X)
    clf = FERLClassifier(variant, width_factor=width, random_state=0).fit(X, y)
    radius = clf.robustness_radius(X)
    certified = np.flatnonzero(radius > 0)
    assert len(certified) > 100
    lipschitz = lipschitz_constant(clf.tree_)
    rng = np.random.default_rng(0)
    for i in certified:
        x = X[i]
        corners = rng.choice([-1.0, 1.0], size=(60, X.shape[1]))
        interior = rng.uniform(-1.0, 1.0, size=(60, X.shape[1]))
        delta = 0.999 * radius[i] * np.vstack([corners, interior])
        phi, lost = clf._firing(np.vstack([x, x + delta]))
        p = tree_probability(phi, clf.tree_)
        assert (lost[1:].sum(axis=1) == 0).all()  # the gates stay one inside the radius
        assert (p[1:].argmax(axis=1) == p[0].argmax()).all()
        change = np.abs(p[1:] - p[0]).sum(axis=1)
        assert (change <= lipschitz * np.abs(delta).max(axis=1) + 1e-12).all()  # eq. 10 bound


def test_radius_is_zero_where_a_gate_is_active():
    X, y = load_wine(return_X_y=True)
    X = MinMaxScaler().fit_transform(X)
    clf = FERLClassifier("deep", width_factor=10.0, random_state=0).fit(X, y)
    t = clf.tree_
    x = X[:20].copy()
    x[:, t.feature[0]] = t.hi[0] + 0.3 * clf._gate_margin()[0]
    assert (clf.routing_loss(x).sum(axis=1) > 0).all()
    np.testing.assert_array_equal(clf.robustness_radius(x), 0.0)
    clf.set_params(bounded_support=False)
    assert (clf.robustness_radius(x) > 0).any()


def test_step_memberships_make_the_constant_infinite_and_the_radius_zero():
    rng = np.random.default_rng(1)
    X = (rng.random((300, 4)) < 0.5).astype(float)  # binary: tied quantiles give steps
    y = (X[:, 0] + X[:, 1] > 0.5).astype(int)
    clf = FERLClassifier("compact", partition="fixed", random_state=0).fit(X, y)
    assert lipschitz_constant(clf.tree_) == np.inf
    np.testing.assert_array_equal(clf.robustness_radius(X), 0.0)


def _radius_in(tree, X, domain):
    X = np.asarray(X, dtype=float)
    phi, lost = tree.firing(X, True, np.ones(tree.n_nodes))
    return robustness_radius(tree, X, phi, lost, True, feature_domain(domain, np.array([[0.0, 1.0]] * 2)))


def test_a_domain_that_does_not_bind_keeps_the_papers_radius():
    t = _hand_tree()
    X = [[0.2, 0.5], [0.98, 0.5], [0.98, 0.1], [0.995, 0.1], [1.05, 0.1], [0.55, 0.1]]
    paper = _radius(t, X)  # the values of test_radius_on_a_hand_built_tree
    np.testing.assert_array_equal(_radius_in(t, X, None), paper)
    np.testing.assert_array_equal(_radius_in(t, X, (-5.0, 5.0)), paper)  # wider than every node's range


def test_a_node_range_on_the_domain_edge_no_longer_caps_the_radius():
    """Both nodes observed [0, 1], the concepts' domain: a row on its edge (x0 = 1) had radius 0 (its
    slack to the root's range), and 0.995 was capped at 0.005; in [0, 1] they are capped only by
    eq. 12 (Delta = 0.6, L_T = 30: 0.01) and x1's slack 0.1 to the other node's range."""
    t = _hand_tree()
    X = [[1.0, 0.1], [0.995, 0.1], [0.98, 0.995]]
    np.testing.assert_allclose(_radius(t, X), [0.0, 0.005, 0.0], atol=1e-12)
    # the last row's leaf [0.5, 0.5] ties: 0 whatever the domain
    np.testing.assert_allclose(_radius_in(t, X, (0.0, 1.0)), [0.01, 0.01, 0.0], atol=1e-12)


def test_the_domain_radius_keeps_the_class_of_p_t_on_clipped_perturbations():
    X, y = load_wine(return_X_y=True)
    X = MinMaxScaler().fit_transform(X)  # every feature reaches 0 and 1: nodes' ranges touch the edges
    clf = FERLClassifier("deep", width_factor=10.0, random_state=0).fit(X, y)
    free, bounded = clf.robustness_radius(X), clf.robustness_radius(X, domain=(0.0, 1.0))
    assert np.all(bounded >= free) and (bounded > free).sum() >= 5
    rng = np.random.default_rng(0)
    for i in np.flatnonzero(bounded > free):
        delta = 0.999 * bounded[i] * np.vstack([rng.choice([-1.0, 1.0], size=(100, X.shape[1])),
                                                rng.uniform(-1.0, 1.0, size=(100, X.shape[1]))])
        phi, lost = clf._firing(np.clip(np.vstack([X[i], X[i] + delta]), 0.0, 1.0))
        p = tree_probability(phi, clf.tree_)
        assert (lost[1:].sum(axis=1) == 0).all()
        assert (p[1:].argmax(axis=1) == p[0].argmax()).all()
