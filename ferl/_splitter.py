"""Split search kernels (numba): bootstrapped fuzzy cuts, fixed partitions, WGI and CCI gains.

Paper section 3.1 and appendix B. Features are presorted once per fit; a node only filters the global
order to its active samples (non-zero firing), which preserves it, so no node re-sorts. The B bootstrap
resamples are multiplicity vectors drawn once per fit; a resample changes sample weights, not order.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ferl._tree import trapezoid

__all__ = ["GAIN_GINI", "GAIN_CCI", "best_learned_split", "best_fixed_split", "split_gain"]

GAIN_GINI = 0
GAIN_CCI = 1
GAIN_ENTROPY = 2


@njit(cache=True)
def _plogp_sum(w):
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
    return _plogp_sum(wl) + _plogp_sum(wr) - _plogp_sum(wt)


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
        ``(max_c WL_c + max_c WR_c - max_c W_c) / W_total``.
    total_weight : float
        Root soft weight, so gains are comparable across nodes.
    min_leaf : float
        Minimum soft weight of each child; below it the gain is ``-inf``.

    Returns
    -------
    float
        The gain, or ``-inf`` when a child would be lighter than ``min_leaf``.
    """
    wl = np.zeros(n_classes)
    wt = np.zeros(n_classes)
    for i in range(xs.shape[0]):
        mu = trapezoid(xs[i], a, b, c, d)
        wl[ys[i]] += ws[i] * mu
        wt[ys[i]] += ws[i]
    wr = wt - wl
    sl = wl.sum()
    st = wt.sum()
    sr = st - sl
    if sl < min_leaf or sr < min_leaf or st <= 0.0:
        return -np.inf
    if criterion == GAIN_CCI:
        return (wl.max() + wr.max() - wt.max()) / total_weight
    if criterion == GAIN_ENTROPY:
        return entropy_gain(wl, wr, wt) / total_weight
    alpha = sl / st
    dist = 0.0
    for k in range(n_classes):
        diff = wl[k] / sl - wr[k] / sr
        dist += diff * diff
    return st * alpha * (1.0 - alpha) * dist / total_weight


@njit(cache=True)
def _best_crisp_cut(xs, ys, ws, n_classes, lo, hi):
    """Gini-optimal crisp cut in ``[lo, hi]`` of one weighted, sorted sample; NaN when no cut there
    separates weight."""
    total = np.zeros(n_classes)
    for i in range(xs.shape[0]):
        total[ys[i]] += ws[i]
    wsum = total.sum()
    left = np.zeros(n_classes)
    wl = 0.0
    best = -1.0
    cut = np.nan
    for i in range(xs.shape[0] - 1):
        w = ws[i]
        if w != 0.0:
            left[ys[i]] += w
            wl += w
        if xs[i] == xs[i + 1] or wl <= 0.0:
            continue
        wr = wsum - wl
        if wr <= 1e-12 * wsum:
            break
        mid = 0.5 * (xs[i] + xs[i + 1])
        if mid < lo or mid > hi:
            continue
        score = 0.0
        for k in range(n_classes):
            r = total[k] - left[k]
            score += left[k] * left[k] / wl + r * r / wr
        if score > best:
            best = score
            cut = mid
    return cut


@njit(cache=True)
def _active_order(order_f, active):
    m = 0
    for j in range(order_f.shape[0]):
        if active[order_f[j]]:
            m += 1
    idx = np.empty(m, dtype=np.int64)
    m = 0
    for j in range(order_f.shape[0]):
        if active[order_f[j]]:
            idx[m] = order_f[j]
            m += 1
    return idx


@njit(cache=True)
def best_learned_split(X, y, w, order, mult, n_classes, width_factor, min_width, criterion,
                       total_weight, min_leaf, window=None):
    """Best learned fuzzy split of one node (paper eq. 1-2, appendix B).

    For every feature, each of the B bootstrap resamples gives its Gini-optimal crisp cut ``c_b``
    (one sweep over the presorted active samples with weights ``w x multiplicity``);
    ``theta = median_b c_b`` and ``h = max(width_factor * MAD, min_width[f])``. The resulting fuzzy
    split is scored on the node's (non-resampled) weights with `split_gain`.

    Parameters
    ----------
    X : ndarray of shape (n, d), float64
    y : ndarray of shape (n,), int64
    w : ndarray of shape (n,), float64
        Node firing x sample weight; samples with ``w == 0`` are inactive.
    order : ndarray of shape (d, n), int64
        Argsort of each feature over all training samples (computed once per fit).
    mult : ndarray of shape (B, n), float64
        Bootstrap multiplicities.
    width_factor : float
        gamma of eq. 2.
    min_width : ndarray of shape (d,), float64
        Documented minimum half-width per feature (guards h = 0).
    window : ndarray of shape (d, 2), float64, or None
        Admissible cut locations ``[lo, hi]`` per feature (None: unrestricted): the builder keeps
        a node from cutting again inside the fuzzy band of an ancestor's cut.

    Returns
    -------
    feature : int (-1 when no admissible split)
    theta, h, gain : float
    """
    n_boot = mult.shape[0]
    active = w > 0.0
    best_f = -1
    best_theta = np.nan
    best_h = np.nan
    best_gain = -np.inf
    cuts = np.empty(n_boot)
    for f in range(X.shape[1]):
        idx = _active_order(order[f], active)
        m = idx.shape[0]
        if m < 2:
            continue
        xs = X[idx, f]
        if xs[0] == xs[m - 1]:
            continue
        ys = y[idx]
        ws = w[idx]
        wb = np.empty(m)
        lo = -np.inf if window is None else window[f, 0]
        hi = np.inf if window is None else window[f, 1]
        n_valid = 0
        for b in range(n_boot):
            for j in range(m):
                wb[j] = ws[j] * mult[b, idx[j]]
            cut = _best_crisp_cut(xs, ys, wb, n_classes, lo, hi)
            if not np.isnan(cut):
                cuts[n_valid] = cut
                n_valid += 1
        if n_valid == 0:
            continue
        valid = cuts[:n_valid]
        theta = np.median(valid)
        h = max(width_factor * np.median(np.abs(valid - theta)), min_width[f])
        gain = split_gain(xs, ys, ws, -np.inf, -np.inf, theta - h, theta + h, n_classes,
                          criterion, total_weight, min_leaf)
        if gain > best_gain:
            best_gain = gain
            best_f = f
            best_theta = theta
            best_h = h
    return best_f, best_theta, best_h, best_gain


@njit(cache=True)
def best_fixed_split(X, y, w, sets, allowed, n_classes, criterion, total_weight, min_leaf):
    """Best ``(feature, fuzzy set)`` among fixed partitions (compact variant).

    Parameters
    ----------
    X, y, w : as in `best_learned_split`.
    sets : ndarray of shape (d, n_sets, 4), float64
        Trapezoids of each feature's fixed fuzzy sets (low / medium / high).
    allowed : ndarray of shape (d, n_sets), bool
        Candidates still open at this node (a set already tested on the path is not retested,
        which would give rules such as "f is not high AND f is high").

    Returns
    -------
    feature, fuzzy_set : int (-1 when no admissible split)
    gain : float
    """
    active = np.flatnonzero(w > 0.0)
    ys = y[active]
    ws = w[active]
    best_f = -1
    best_s = -1
    best_gain = -np.inf
    for f in range(X.shape[1]):
        xs = X[active, f]
        for s in range(sets.shape[1]):
            if not allowed[f, s]:
                continue
            t = sets[f, s]
            gain = split_gain(xs, ys, ws, t[0], t[1], t[2], t[3], n_classes, criterion,
                              total_weight, min_leaf)
            if gain > best_gain:
                best_gain = gain
                best_f = f
                best_s = s
    return best_f, best_s, best_gain
