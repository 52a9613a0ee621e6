"""A robustness certificate of the learned weights of evidence (beyond the paper).

With ``evidence_weights="learned"`` the class `predict` returns is the arg-max of the pignistic
probability of the Dempster combination of the weighted sources (`ferl.evidence.weights`), not the
class of the tree's ``P_T`` that the paper's certificate (appendix A.3, `ferl.tree.certificate`)
bounds. This module certifies that class. Notation of `evidence_from_weights`: sources
``s_j(x)`` in [0, 1] (`rule_sources`), weights ``beta_kj`` and ``beta_0k``, per class the positive
and negative sums ``w+_k``, ``w-_k``, their difference ``w_k = sum_j beta_kj s_j(x) + beta_0k``,
``a_k = exp(-w-_k)``, ``b_k = 1 - a_k``, ``E_k = exp(w+_k) - 1``; ``C`` classes.

**1. BetP's order from the weights.** Summing ``m(A) / |A|`` over the focal sets ``A`` that hold
``k`` (`evidence_from_weights` gives every ``m(A)``) and writing ``1 / (|B| + 1)`` as
``integral_0^1 t^|B| dt``: ``BetP(k) = v_k / (q Z)`` with ``v_k = a_k (E_k + I_k)``,
``I_k = integral_0^1 prod_{l != k} (b_l + a_l t) dt``. Each factor lies in ``[t, 1]``, so
``I_k`` lies in ``[1 / C, 1]``, and since ``a_k (1 + E_k) = exp(w_k)``::

    exp(w_k) rho(w+_k) <= v_k = exp(w_k) (1 - exp(-w+_k) (1 - I_k)) <= exp(w_k),
    rho(w) = 1 - (1 - 1/C) exp(-w).

Hence ``BetP(t) / BetP(c) >= exp(w_t - w_c - g(w+_t))`` with ``g(w) = -log rho(w)``, which falls
from ``log C`` at ``w = 0`` to 0: **the class ``t`` has the largest BetP wherever its margin of
log-plausibility ``w_t - w_c`` (the plausibility is proportional to ``exp(w_k)``) exceeds
``g(w+_t)`` over every other class ``c``** (the bridge from the plausibilities' order to BetP's).
Where it exceeds ``g + delta``, ``BetP(t) >= exp(delta) BetP(c)`` and, ``t`` leading,
``BetP(t) >= 1 / C``, so ``BetP(t) - BetP(c) >= (1 - exp(-delta)) / C``; `ORDER_GAP` sets ``delta``
so that this gap is ten times the mass the read-out may leave out of each class's BetP
(`ferl.evidence.combination.BETWEEN_TOL`): the computed BetP ranks ``t`` first too, by at least
``ORDER_GAP - BETWEEN_TOL``, and so does a uniform Shafer discount of it by a reliability of at least
`DISCOUNT_FLOOR` (the product's operating point, `cbm.heads.operating.decide`), which scales that
lead by the reliability and adds the same ``(1 - r) / C`` to every class.

**2. The sources over a box.** Let ``B_r(x)`` be the points of the domain ``[l, u]`` (per
feature) within ``l_inf`` distance ``r`` of ``x``. A feature source ``s_f`` is a clipped ramp of
``x_f``, non-decreasing: over ``B_r`` it spans exactly ``[s_f(max(x_f - r, l_f)), s_f(min(x_f + r,
u_f))]``. A leaf's source is its firing, the product along its path of one factor per node
``g_o(x_f) mu_o(x_f)`` (left) or ``g_o(x_f) (1 - mu_o(x_f))`` (right), ``mu_o`` the node's
trapezoid and ``g_o`` its bounded-support gate (1 with the gates off). Both are plateau functions
(non-decreasing, 1 on the plateau, non-increasing; steps included), so over an interval ``[u, v]``
each ranges within ``[min(h(u), h(v)), max(h(u), h(v))]``, the upper end 1 where ``[u, v]`` meets
the plateau, and ``1 - mu_o`` within one minus that interval reversed; the product of these
non-negative intervals along the path bounds the firing: ``s_j(x')`` lies in ``[s_j^lo(r),
s_j^hi(r)]``. The bounds are products of the same floats in the same order as the firing's
(`ferl.tree.firing`), and rounding is monotone, so they hold for the computed firings too.

**3. The certificate.** With ``Delta_cj = beta_tj - beta_cj`` and ``t`` the class of ``x``, every
``x'`` in ``B_r(x)`` has, the margin being linear in the sources::

    w_t(x') - w_c(x') >= w_t(x) - w_c(x) - sum_j [Delta_cj^+ (s_j(x) - s_j^lo) + Delta_cj^- (s_j^hi - s_j(x))]
                       = L_c(r),
    w+_t(x') >= sum_j beta_tj^+ s_j^lo + beta_0t^+ = W_t(r),

and ``g`` falls, so ``L_c(r) > g(W_t(r)) + delta`` for every ``c != t`` certifies that every ``x'``
of ``B_r(x)`` gets class ``t``. The intervals grow with ``r``, so ``L_c`` falls and ``g(W_t)``
rises: the certified radii form an interval from 0 to some ``r*``, and `weights_radius` returns a
certified radius short of ``r*`` by at most ``2^-BISECTIONS`` times the initial bracket (bisection).
The bound is never looser than a Lipschitz one (``|s_j(x') - s_j(x)| <= Lip_j r``: a ramp's slope
``1 / span_f``, a leaf's sum of its factors' slopes), so ``r*`` is at least the closed form ``min_c
(w_t - w_c - g(beta_0t^+) - delta) / sum_j |Delta_cj| Lip_j``; it is tighter where a source cannot
move (a concept at the edge of [0, 1] moves one way only, a leaf on a node's plateau stays put).
Beyond the last breakpoint of every source (ramp ends, trapezoid corners, gate ends) nothing
changes, so the domain is first cut to just past those breakpoints; a box that covers the cut domain
certifies every point: radius ``inf``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ferl.evidence.combination import BETWEEN_TOL
from ferl.evidence.weights import EvidenceWeights, evidence_from_weights
from ferl.tree.fuzzy_tree import FuzzyTree
from ferl.tree.membership import support_gate, trapezoid

__all__ = ["BISECTIONS", "DISCOUNT_FLOOR", "ORDER_GAP", "bridge_gap", "source_bounds", "weights_radius"]

#: Halvings of the bracket of the certified radius.
BISECTIONS = 30
#: The smallest BetP gap over the runner-up that a certified class keeps (module docstring, part 1).
ORDER_GAP = 10 * BETWEEN_TOL
#: The smallest reliability ``r`` of a uniform Shafer discount (``BetP^r = r BetP + (1 - r) / C``,
#: `ferl.evidence.discount_evidence`) that keeps the certified class BetP's arg-max in float64: the
#: computed BetP of the certified class leads by at least ``ORDER_GAP - BETWEEN_TOL`` (module
#: docstring, part 1), ``r`` times which must exceed the rounding of the discounted BetP (far below 1e-14).
DISCOUNT_FLOOR = 1e-14 / (ORDER_GAP - BETWEEN_TOL)


def bridge_gap(w_plus: np.ndarray, n_classes: int) -> np.ndarray:
    """``g(w) = -log(1 - (1 - 1/C) exp(-w))``: the margin of log-plausibility past which the class
    with positive weight sum ``w`` also leads in BetP (module docstring, part 1).

    Parameters
    ----------
    w_plus : ndarray, float64 >= 0
        ``w+`` of the leading class.
    n_classes : int >= 2

    Returns
    -------
    ndarray of the shape of ``w_plus``, in ``[0, log C]``
    """
    return -np.log1p(-(1.0 - 1.0 / n_classes) * np.exp(-np.maximum(w_plus, 0.0)))


@njit(cache=True, inline="always")
def _range(h_u, h_v, meets):
    """Range of a plateau function over ``[u, v]`` from its end values and whether the interval
    meets the plateau (where the function is 1)."""
    return min(h_u, h_v), 1.0 if meets else max(h_u, h_v)


@njit(cache=True)
def _firing_bounds(X, radius, domain, feature, trap, left, right, lo, hi, margin, gates, out_lo, out_hi):
    """Bounds of every node's firing over the box of each row (module docstring, part 2)."""
    n, n_nodes = X.shape[0], feature.shape[0]
    for i in range(n):
        out_lo[i, 0] = out_hi[i, 0] = 1.0
        for o in range(n_nodes):
            f = feature[o]
            if f < 0:
                continue
            p_lo, p_hi = out_lo[i, o], out_hi[i, o]
            x = X[i, f]
            u = min(max(x - radius[i], domain[f, 0]), x)
            v = max(min(x + radius[i], domain[f, 1]), x)
            a, b, c, d = trap[o, 0], trap[o, 1], trap[o, 2], trap[o, 3]
            m_lo, m_hi = _range(trapezoid(u, a, b, c, d), trapezoid(v, a, b, c, d), v >= b and u <= c)
            g_lo, g_hi = 1.0, 1.0
            if gates:
                g_lo, g_hi = _range(support_gate(u, lo[o], hi[o], margin[o]),
                                    support_gate(v, lo[o], hi[o], margin[o]), v >= lo[o] and u <= hi[o])
            out_lo[i, left[o]] = p_lo * g_lo * m_lo
            out_hi[i, left[o]] = p_hi * g_hi * m_hi
            out_lo[i, right[o]] = p_lo * g_lo * (1.0 - m_hi)
            out_hi[i, right[o]] = p_hi * g_hi * (1.0 - m_lo)


def _breakpoints(tree: FuzzyTree, feature_range: np.ndarray, margin: np.ndarray, gates: bool) -> np.ndarray:
    """Per feature, points just below and above every point where a source of it can change, (d, 2):
    each source is constant below the first and above the second."""
    points = feature_range.astype(np.float64).copy()
    internal = np.flatnonzero(tree.feature >= 0)
    f = tree.feature[internal]
    ends = [tree.trap[internal, k] for k in range(4)]
    if gates:
        ends += [tree.lo[internal] - margin[internal], tree.hi[internal] + margin[internal]]
    for e in ends:
        finite = np.isfinite(e)
        np.minimum.at(points[:, 0], f[finite], e[finite])
        np.maximum.at(points[:, 1], f[finite], e[finite])
    pad = 1e-6 * (1.0 + np.abs(points).max(axis=1))  # strictly past a step's jump
    return points + np.stack([-pad, pad], axis=1)


def source_bounds(tree: FuzzyTree, X: np.ndarray, radius: np.ndarray, domain: np.ndarray,
                  feature_range: np.ndarray, margin: np.ndarray, gates: bool
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper bounds of every source of `rule_sources` over the box of each row.

    Parameters
    ----------
    tree : FuzzyTree
    X : ndarray of shape (n, d), float64, finite
    radius : ndarray of shape (n,), float64 >= 0
        The box's half-width per row.
    domain : ndarray of shape (d, 2)
        Bounds the box is cut to (`ferl._inputs.feature_domain`); the box always holds ``x``.
    feature_range : ndarray of shape (d, 2)
        The training ranges of the ramp sources.
    margin : ndarray of shape (n_nodes,)
        Gate margins (`FuzzyTree.margins`).
    gates : bool
        Whether the bounded-support gates are on.

    Returns
    -------
    lower, upper : ndarray of shape (n, d + n_leaves), float64 in [0, 1]
        Features first, then leaves, as in `rule_sources`; at radius 0 both are the sources.
    """
    X = np.ascontiguousarray(X, dtype=np.float64)
    lo_f, span = feature_range[:, 0], feature_range[:, 1] - feature_range[:, 0]
    r = radius[:, None]
    u, v = np.minimum(np.maximum(X - r, domain[:, 0]), X), np.maximum(np.minimum(X + r, domain[:, 1]), X)
    scale = np.where(span > 0, span, 1.0)
    with np.errstate(invalid="ignore", over="ignore"):
        ramp = [np.where(span > 0, np.clip((z - lo_f) / scale, 0.0, 1.0), 0.0) for z in (u, v)]
    lo_t, hi_t, trap = tree.kernel_arrays()
    node_lo, node_hi = np.empty((X.shape[0], tree.n_nodes)), np.empty((X.shape[0], tree.n_nodes))
    _firing_bounds(X, np.ascontiguousarray(radius, dtype=np.float64), np.ascontiguousarray(domain),
                   tree.feature, trap, tree.left, tree.right, lo_t, hi_t,
                   np.ascontiguousarray(margin, dtype=np.float64), gates, node_lo, node_hi)
    leaves = tree.is_leaf
    return np.hstack([ramp[0], node_lo[:, leaves]]), np.hstack([ramp[1], node_hi[:, leaves]])


def weights_radius(weights: EvidenceWeights, tree: FuzzyTree, X: np.ndarray, sources: np.ndarray,
                   feature_range: np.ndarray, margin: np.ndarray, gates: bool,
                   domain: np.ndarray) -> np.ndarray:
    """Certified ``l_inf`` radius of the class of the learned weights' BetP (module docstring).

    Every ``x'`` of the domain with ``||x' - x||_inf <= radius(x)`` gets the class that
    ``argmax BetP(x)`` gives (`predict`); 0 where the margin at ``x`` itself does not clear the
    bridge ``g + delta`` (a near tie, or a plausibility order that BetP does not share), ``inf``
    where no point of the domain changes the class.

    Parameters
    ----------
    weights : EvidenceWeights
    tree : FuzzyTree
    X : ndarray of shape (n, d), float64, finite
    sources : ndarray of shape (n, d + n_leaves)
        `rule_sources` of ``X`` (the leaves' gated firings).
    feature_range : ndarray of shape (d, 2)
    margin : ndarray of shape (n_nodes,)
        Gate margins (`FuzzyTree.margins`).
    gates : bool
    domain : ndarray of shape (d, 2)
        Bounds the perturbations stay in (`ferl._inputs.feature_domain`).

    Returns
    -------
    ndarray of shape (n,), float64 >= 0
    """
    n, n_classes = X.shape[0], weights.coef.shape[0]
    top = np.argmax(evidence_from_weights(weights, sources).pignistic, axis=1)
    points = _breakpoints(tree, feature_range, margin, gates)
    cut = np.stack([np.maximum(domain[:, 0], points[:, 0]), np.minimum(domain[:, 1], points[:, 1])], axis=1)
    cut[:, 1] = np.maximum(cut[:, 0], cut[:, 1])  # a domain beside every breakpoint: one point of it
    width = (np.maximum(cut[:, 1], X) - np.minimum(cut[:, 0], X)).max(axis=1)  # a box that covers it
    logit = sources @ weights.coef.T + weights.intercept
    margin_x = logit[np.arange(n), top][:, None] - logit  # w_t(x) - w_c(x)
    delta = -np.log1p(-n_classes * ORDER_GAP) if n_classes * ORDER_GAP < 1 else np.inf
    pos, prior = np.maximum(weights.coef, 0.0), np.maximum(weights.intercept, 0.0)

    def certified(radius, X, sources, margin_x, top):
        """Whether part 3's condition holds at ``radius`` for each of the given rows."""
        lower, upper = source_bounds(tree, X, radius, cut, feature_range, margin, gates)
        down, up = np.maximum(sources - lower, 0.0), np.maximum(upper - sources, 0.0)
        bound = np.empty_like(margin_x)
        for t in np.unique(top):
            rows = top == t
            diff = weights.coef[t] - weights.coef  # Delta_cj, (C, n_sources)
            bound[rows] = (margin_x[rows] - down[rows] @ np.maximum(diff, 0.0).T
                           - up[rows] @ np.maximum(-diff, 0.0).T)
            bound[rows, t] = np.inf
        w_plus = (lower * pos[top]).sum(axis=1) + prior[top]
        return bound.min(axis=1) > bridge_gap(w_plus, n_classes) + delta

    whole = certified(width, X, sources, margin_x, top)
    radius = np.where(whole, np.inf, 0.0)
    rows = np.flatnonzero(~whole & certified(np.zeros(n), X, sources, margin_x, top))
    low, high = np.zeros(rows.size), width[rows]
    part = (X[rows], sources[rows], margin_x[rows], top[rows])
    for _ in range(BISECTIONS if rows.size else 0):
        mid = 0.5 * (low + high)
        ok = certified(mid, *part)
        low, high = np.where(ok, mid, low), np.where(ok, high, mid)
    radius[rows] = low
    return radius
