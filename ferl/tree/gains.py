"""Gains of a fuzzy split (numba): weighted Gini (WGI), Complete Classification Index (CCI), entropy.

Paper section 3.1 and appendix A.1. A split sends each active row to the "is S" child with
membership ``mu`` and to the "is not S" child with ``1 - mu``; its gain compares the children's
class weights with the node's. `split_gain` scores any trapezoid; `shoulder_gain` scores the
learned split's left shoulder given the node's class totals, which the split search computes once
per node instead of once per feature (the same sums in the same order, so the same gains bit for
bit).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ferl.tree.membership import trapezoid

__all__ = ["GAIN_GINI", "GAIN_CCI", "GAIN_ENTROPY", "TIE_TOL", "class_totals", "entropy_gain",
           "plogp_sum", "shoulder_gain", "split_gain"]

GAIN_GINI = 0
GAIN_CCI = 1
GAIN_ENTROPY = 2
#: Relative tolerance of float comparisons that rounding must not decide: two crisp-cut scores
#: within it are a tie (the first cut wins), a child's weight within it of ``min_leaf`` is enough.
TIE_TOL = 1e-12


@njit(cache=True)
def plogp_sum(w):
    """``sum_c w_c log w_c - W log W`` (= ``-W H(w / W)``) of a non-negative class-weight vector."""
    total = w.sum()
    out = 0.0
    for k in range(w.shape[0]):
        if w[k] > 0.0:
            out += w[k] * np.log(w[k])
    return out - total * np.log(total) if total > 0.0 else 0.0


@njit(cache=True)
def entropy_gain(wl, wr, wt):
    """Weighted information gain ``W H(p) - WL H(pL) - WR H(pR)`` (nats) of class weights."""
    return plogp_sum(wl) + plogp_sum(wr) - plogp_sum(wt)


@njit(cache=True)
def class_totals(ys, ws, n_classes):
    """Class weights ``W_c = sum_{i: y_i = c} w_i`` of a node, in row order, shape (n_classes,)."""
    wt = np.zeros(n_classes)
    for i in range(ys.shape[0]):
        wt[ys[i]] += ws[i]
    return wt


@njit(cache=True)
def _score(wl, wt, plogp_total, criterion, total_weight, min_leaf):
    """The gain of children with class weights ``wl`` and ``wt - wl`` (see `split_gain`)."""
    wr = wt - wl
    sl = wl.sum()
    st = wt.sum()
    sr = st - sl
    floor = min_leaf * (1.0 - TIE_TOL)
    if sl < floor or sr < floor or st <= 0.0:
        return -np.inf
    if criterion == GAIN_CCI:
        return (wl.max() + wr.max() - wt.max()) / total_weight
    if criterion == GAIN_ENTROPY:
        return (plogp_sum(wl) + plogp_sum(wr) - plogp_total) / total_weight
    alpha = sl / st
    dist = 0.0
    for k in range(wt.shape[0]):
        diff = wl[k] / sl - wr[k] / sr
        dist += diff * diff
    return st * alpha * (1.0 - alpha) * dist / total_weight


@njit(cache=True)
def split_gain(xs, ys, ws, a, b, c, d, n_classes, criterion, total_weight, min_leaf):
    """Gain of the complementary fuzzy split ``(f is S, f is not S)`` over one node's samples.

    Parameters
    ----------
    xs : ndarray of shape (m,), float64
        Feature values of the node's active samples.
    ys : ndarray of shape (m,), int64
        Encoded labels in ``[0, n_classes)``.
    ws : ndarray of shape (m,), float64
        Sample weight x node firing (>= 0).
    a, b, c, d : float
        Trapezoid of the left ("is S") fuzzy set.
    criterion : int
        ``GAIN_GINI``: weighted Gini decrease ``W [G(p) - a G(pL) - (1-a) G(pR)] / W_total``, which
        equals ``W a (1-a) ||pL - pR||^2 / W_total`` (appendix A.1, eq. 6). ``GAIN_CCI``: Complete
        Classification Index, the change of correctly classified soft mass
        ``(max_c WL_c + max_c WR_c - max_c W_c) / W_total``. ``GAIN_ENTROPY`` (beyond the paper,
        see `ferl.presets`): information gain ``(W H(p) - WL H(pL) - WR H(pR)) / W_total``.
    total_weight : float
        Root soft weight, so gains are comparable across nodes.
    min_leaf : float
        Minimum soft weight of each child; below it (by more than a relative `TIE_TOL`, so that
        the order of a sum never decides) the gain is ``-inf``.

    Returns
    -------
    float
        The gain, or ``-inf`` when a child would be lighter than ``min_leaf``.
    """
    wl = np.zeros(n_classes)
    for i in range(xs.shape[0]):
        wl[ys[i]] += ws[i] * trapezoid(xs[i], a, b, c, d)
    wt = class_totals(ys, ws, n_classes)
    plogp_total = plogp_sum(wt) if criterion == GAIN_ENTROPY else 0.0
    return _score(wl, wt, plogp_total, criterion, total_weight, min_leaf)


@njit(cache=True)
def shoulder_gain(xt_f, rows, ys, ws, wt, plogp_total, c, d, criterion, total_weight, min_leaf):
    """`split_gain` of the learned split's left shoulder ``(-inf, -inf, c, d)``, ``c < d``, read
    from the feature's training values, given the node's class totals.

    The same gain as `split_gain` bit for bit: the membership ``(d - x) / (d - c)`` clipped to
    [0, 1] is the trapezoid's (the ratio rounds to at least 1 where ``x <= c`` and to at most 0
    where ``x >= d``), without its branches, which mispredict on values inside the band. Where
    ``d - c`` rounds to 0 or overflows (values near the float range's ends), the trapezoid itself.

    Parameters
    ----------
    xt_f : ndarray of shape (n,), float64
        The feature's values over every training row.
    rows, ys, ws : ndarrays of shape (m,)
        The node's active rows, their node-local classes and weights.
    wt : ndarray of shape (n_local,), float64
        `class_totals` of ``ys``, ``ws``.
    plogp_total : float
        ``plogp_sum(wt)`` (used by ``GAIN_ENTROPY`` only).
    c, d : float
        The band ``theta -+ h``.
    criterion, total_weight, min_leaf
        As in `split_gain`.
    """
    wl = np.zeros(wt.shape[0])
    span = d - c
    if 0.0 < span < np.inf:
        for i in range(rows.shape[0]):
            mu = min(max((d - xt_f[rows[i]]) / span, 0.0), 1.0)
            wl[ys[i]] += ws[i] * mu
    else:  # a band narrower than the values' rounding, or wider than a float: the trapezoid
        for i in range(rows.shape[0]):
            wl[ys[i]] += ws[i] * trapezoid(xt_f[rows[i]], -np.inf, -np.inf, c, d)
    return _score(wl, wt, plogp_total, criterion, total_weight, min_leaf)
