"""Local robustness certificate of a fuzzy tree (paper appendix A.3, eqs. 9-12).

On inputs whose support gates are all one, the leaf firings form a partition of unity (eq. 7) and
``P_T(x) = sum_l phi_l(x) p_l`` (eq. 9) is a probability vector. A node's membership is
``lambda_o``-Lipschitz, ``lambda_o`` its steepest ramp slope (``1 / (2 h_o)`` for a learned split), and
``||P_T(x) - P_T(x')||_1 <= L_T ||x - x'||_inf`` with ``L_T = max over root-to-leaf paths of
sum_o 2 lambda_o`` (eq. 10: ``sum_o 1 / h_o`` for learned splits). If the top class ``c*`` of
``P_T(x)`` is unique with margin ``Delta(x)`` (eq. 11), the class of ``P_T`` cannot change within
``||x - x'||_inf < Delta(x) / (2 L_T)`` (eq. 12).

The proposition needs the gates to stay one on the perturbed input as well. `robustness_radius`
therefore also caps the radius by ``rho(x)``: the largest ``r`` such that every internal node that
can receive firing from some ``x'`` with ``||x' - x||_inf <= r`` keeps ``x'_f`` inside its observed range
(reachability is over-approximated interval by interval, which only makes ``rho`` smaller). With the
gates off the tree is a partition of unity everywhere and there is no cap.

Beyond the paper, the perturbations may be confined to a domain ``[l_f, u_f]`` per feature (concept
probabilities cannot leave [0, 1]): the box is intersected with it, so a node whose observed range
reaches the domain's edge on one side (``lo_o <= l_f``) keeps its gate one on that side whatever the
radius, and only the edges inside the domain cap ``rho``. With the unbounded domain (the default)
the radius is the paper's.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ferl.tree.fuzzy_tree import FuzzyTree

__all__ = ["membership_slopes", "lipschitz_constant", "tree_probability", "robustness_radius"]


def membership_slopes(tree: FuzzyTree) -> np.ndarray:
    """Steepest slope ``lambda_o`` of each internal node's membership (0 at leaves).

    Returns
    -------
    ndarray of shape (n_nodes,), float64 >= 0
        ``1 / (2 h)`` for a learned split (eq. 1); for a trapezoid ``(a, b, c, d)`` the larger of
        ``1 / (b - a)`` and ``1 / (d - c)`` over its finite ramps; ``inf`` for a step (a finite ramp of
        zero width, e.g. tied quantiles of a fixed partition).
    """
    slopes = np.zeros(tree.n_nodes)
    for o in np.flatnonzero(~tree.is_leaf):
        a, b, c, d = tree.trap[o]
        for lo, hi in ((a, b), (c, d)):
            if np.isfinite(lo) and np.isfinite(hi):
                slopes[o] = max(slopes[o], 1.0 / (hi - lo) if hi > lo else np.inf)
    return slopes


def lipschitz_constant(tree: FuzzyTree) -> float:
    """``L_T`` of paper eq. 10: the largest ``sum_o 2 lambda_o`` over root-to-leaf paths.

    For learned splits ``2 lambda_o = 1 / h_o``, the paper's ``sum_o 1 / h_o``. ``inf`` when a path holds a
    step membership.
    """
    two_slopes = 2.0 * membership_slopes(tree)
    along = np.zeros(tree.n_nodes)
    for o in range(1, tree.n_nodes):
        p = tree.parent[o]
        along[o] = along[p] + two_slopes[p]
    return float(along[tree.is_leaf].max())


def tree_probability(phi: np.ndarray, tree: FuzzyTree) -> np.ndarray:
    """``P_T(x) = sum_l phi_l(x) p_l`` (paper eq. 9).

    Parameters
    ----------
    phi : ndarray of shape (n_samples, n_nodes), float64
        Node firings (`FuzzyTree.firing`).
    tree : FuzzyTree

    Returns
    -------
    ndarray of shape (n_samples, n_classes)
        Rows sum to the total leaf firing (1 where the gates are all one).
    """
    leaves = tree.is_leaf
    return phi[:, leaves] @ tree.value[leaves]


@njit(cache=True)
def _gate_slack(X, radius, feature, trap, left, right, lo, hi, domain):
    """Per sample, the smallest distance from ``x_f`` to an edge of the observed range that lies
    inside the domain, over the internal nodes reachable within the ``l_inf`` box of the given
    radius intersected with the domain (conservatively; the box always holds ``x``)."""
    n = X.shape[0]
    n_nodes = feature.shape[0]
    slack = np.full(n, np.inf)
    reach = np.zeros(n_nodes, dtype=np.bool_)
    for i in range(n):
        r = radius[i]
        reach[:] = False
        reach[0] = True
        s = np.inf
        for o in range(n_nodes):
            f = feature[o]
            if f < 0 or not reach[o]:
                continue
            x = X[i, f]
            if lo[o] > domain[f, 0]:  # an edge at or past the domain's cannot be crossed
                s = min(s, x - lo[o])
            if hi[o] < domain[f, 1]:
                s = min(s, hi[o] - x)
            u = min(max(x - r, domain[f, 0]), x)
            v = max(min(x + r, domain[f, 1]), x)
            if v >= trap[o, 0] and u <= trap[o, 3]:  # membership > 0 somewhere on [u, v]
                reach[left[o]] = True
            if u <= trap[o, 1] or v >= trap[o, 2]:  # membership < 1 somewhere on [u, v]
                reach[right[o]] = True
        slack[i] = s
    return slack


def robustness_radius(tree: FuzzyTree, X: np.ndarray, phi: np.ndarray, lost: np.ndarray,
                      gates: bool, domain: np.ndarray | None = None) -> np.ndarray:
    """Certified ``l_inf`` radius of each input (paper eq. 12, capped by the gate region).

    ``radius(x) = min(Delta(x) / (2 L_T), rho(x))`` where the gates are all one at ``x``, else 0;
    ``Delta`` is the gap between the two largest entries of ``P_T(x)`` (0 on a tie, hence radius 0)
    and ``rho`` the gate cap described in the module docstring (``inf`` with the gates off). Every
    ``x'`` of the domain with ``||x' - x||_inf < radius(x)`` has ``argmax P_T(x') = argmax P_T(x)``.

    Parameters
    ----------
    tree : FuzzyTree
    X : ndarray of shape (n_samples, n_features), float64
    phi, lost : ndarray of shape (n_samples, n_nodes)
        Firing and gate losses of ``X`` (`FuzzyTree.firing` with the same ``gates``).
    gates : bool
        Whether the bounded-support gates are on.
    domain : ndarray of shape (n_features, 2) or None, default=None
        Bounds ``(l_f, u_f)`` the perturbations stay in (`ferl._inputs.feature_domain`); None:
        unbounded, the paper's certificate.

    Returns
    -------
    ndarray of shape (n_samples,), float64 >= 0
    """
    proba = tree_probability(phi, tree)
    top2 = np.sort(proba, axis=1)[:, -2:]
    delta = top2[:, 1] - top2[:, 0]
    lipschitz = lipschitz_constant(tree)
    if not np.isfinite(lipschitz):
        radius = np.zeros(len(delta))
    elif lipschitz > 0:
        radius = delta / (2.0 * lipschitz)
    else:  # a constant read-out (one leaf): no perturbation changes it, unless the top two tie
        radius = np.where(delta > 0, np.inf, 0.0)
    if gates:
        radius = np.where(lost.sum(axis=1) > 0, 0.0, radius)
        if domain is None:
            domain = np.tile([-np.inf, np.inf], (X.shape[1], 1))
        slack = _gate_slack(np.ascontiguousarray(X, dtype=np.float64), radius, tree.feature,
                            tree.trap, tree.left, tree.right, tree.lo, tree.hi,
                            np.ascontiguousarray(domain, dtype=np.float64))
        radius = np.minimum(radius, np.maximum(slack, 0.0))
    return radius
