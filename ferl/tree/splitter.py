"""Split search kernels (numba): bootstrapped fuzzy cuts and fixed partitions, scored by `ferl.tree.gains`.

Paper section 3.1 and appendix B. A node is its active rows (non-zero firing) and their weights;
its cost is O(active rows), never O(training rows). Features are binned once per fit
(`ferl.tree.binning`) and a node orders its rows by bin with a counting sort, so no node sorts. The B
bootstrap resamples are multiplicity vectors drawn once per fit; a resample changes sample weights,
not order.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ferl.tree.binning import MAX_BINS
from ferl.tree.gains import GAIN_ENTROPY, TIE_TOL, class_totals, plogp_sum, shoulder_gain, split_gain
from ferl.tree.membership import trapezoid

__all__ = ["best_learned_split", "best_fixed_split", "split_rows"]


@njit(cache=True)
def _local_classes(y, rows, n_classes):
    """Node-local class ids ``0..n_local-1`` of the active rows (order of first appearance)."""
    local = np.full(n_classes, -1, dtype=np.int64)
    ys = np.empty(rows.shape[0], dtype=np.int64)
    n_local = 0
    for j in range(rows.shape[0]):
        k = y[rows[j]]
        if local[k] < 0:
            local[k] = n_local
            n_local += 1
        ys[j] = local[k]
    return ys, n_local


@njit(cache=True)
def _bootstrap_totals(ys, w, mult_node, n_local):
    """Class totals ``T[k, b]``, total weights ``W[b]`` and ``sum_k T[k, b]^2`` of every resample."""
    n_boot = mult_node.shape[1]
    totals = np.zeros((n_local, n_boot))
    for j in range(ys.shape[0]):
        for b in range(n_boot):
            totals[ys[j], b] += w[j] * mult_node[j, b]
    wsum = np.zeros(n_boot)
    sq = np.zeros(n_boot)
    for k in range(n_local):
        for b in range(n_boot):
            wsum[b] += totals[k, b]
            sq[b] += totals[k, b] * totals[k, b]
    return totals, wsum, sq


@njit(cache=True)
def _bin_order(codes_f, rows):
    """Counting sort of the node's rows by bin: (positions in bin order, bin starts, bins)."""
    count = np.zeros(MAX_BINS + 1, dtype=np.int64)
    for j in range(rows.shape[0]):
        count[codes_f[rows[j]] + 1] += 1
    n_used = 0
    for t in range(1, MAX_BINS + 1):
        if count[t] > 0:
            n_used += 1
        count[t] += count[t - 1]
    used = np.empty(n_used, dtype=np.int64)
    u = 0
    for t in range(MAX_BINS):
        if count[t + 1] > count[t]:
            used[u] = t
            u += 1
    start = count[:MAX_BINS].copy()
    perm = np.empty(rows.shape[0], dtype=np.int64)
    for j in range(rows.shape[0]):
        c = codes_f[rows[j]]
        perm[count[c]] = j
        count[c] += 1
    return perm, start, used


@njit(cache=True)
def _bootstrap_cuts(perm, start, used, low_f, high_f, ys, w, mult_node, totals, wsum, sq_total,
                    lo, hi):
    """Gini-optimal crisp cut of every bootstrap resample, in one sweep over the bins.

    Maximises ``sum_k L_k^2 / W_L + R_k^2 / W_R`` (the weighted Gini decrease) over the cuts
    between consecutive occupied bins, at ``(high[t] + low[t']) / 2``. The sums of squares of the
    left and right class weights are updated in O(1) per moved sample
    (``(L + v)^2 = L^2 + v (2 L + v)``), so the sweep costs O(m B + bins B), with no factor of the
    number of classes. Scores within a relative `TIE_TOL` are ties and the lowest cut wins. Only
    cuts in ``[lo, hi]`` are candidates; the sweep stops at the first cut above ``hi``.

    Returns
    -------
    cuts : ndarray of shape (n_valid,), the cut of every resample that has one.
    """
    n_boot = mult_node.shape[1]
    left = np.zeros(totals.shape)
    sq_left = np.zeros(n_boot)
    sq_right = sq_total.copy()
    wl = np.zeros(n_boot)
    best = np.full(n_boot, -1.0)
    cut = np.full(n_boot, np.nan)
    for u in range(used.shape[0] - 1):
        here = 0.5 * (high_f[used[u]] + low_f[used[u + 1]])
        if here > hi:  # the cuts increase with u: no later one is a candidate
            break
        t = used[u]
        for pos in range(start[t], start[used[u + 1]]):
            j = perm[pos]
            k = ys[j]
            wj = w[j]
            for b in range(n_boot):
                v = wj * mult_node[j, b]
                lk = left[k, b]
                sq_left[b] += v * (2.0 * lk + v)
                sq_right[b] += v * (v - 2.0 * (totals[k, b] - lk))
                left[k, b] = lk + v
                wl[b] += v
        if here < lo:
            continue
        for b in range(n_boot):
            wr = wsum[b] - wl[b]
            if wl[b] <= 0.0 or wr <= 1e-12 * wsum[b]:
                continue
            score = sq_left[b] / wl[b] + sq_right[b] / wr
            if score > best[b] * (1.0 + TIE_TOL):
                best[b] = score
                cut[b] = here
    return cut[~np.isnan(cut)]


@njit(cache=True)
def best_learned_split(codes, low, high, n_bins, xt, y, rows, w, mult, n_classes, width_factor,
                       min_width, criterion, total_weight, min_leaf, window):
    """Best learned fuzzy split of one node (paper eq. 1-2, appendix B).

    For every feature, each of the B bootstrap resamples gives its Gini-optimal crisp cut ``c_b``
    (one sweep over the node's rows in bin order with weights ``w x multiplicity``, see
    `_bootstrap_cuts`); ``theta = median_b c_b`` and ``h = max(width_factor * MAD, min_width[f])``.
    The fuzzy split is scored on the node's (non-resampled) weights and raw values with
    `ferl.tree.gains.shoulder_gain`; the node's class totals it compares the children with are
    taken once for all features. A feature whose window leaves no cut between its bins is skipped
    (after a cut whose band spans the feature's values, both children are closed to it). Cuts are
    exact to the bin resolution (`ferl.tree.binning`): on a feature with at most 255 distinct
    training values they are those of a search over the sorted values.

    Parameters
    ----------
    codes : ndarray of shape (d, n), uint8
        Bin of every training row (`ferl.tree.binning.BinnedFeatures`).
    low, high : ndarray of shape (d, MAX_BINS), float64
        Value range of every bin.
    n_bins : ndarray of shape (d,), int64
        Bins used by each feature.
    xt : ndarray of shape (d, n), float64
        Raw training values, feature-major.
    y : ndarray of shape (n,), int64
        Encoded labels in ``[0, n_classes)``.
    rows : ndarray of shape (m,), int64
        The node's active rows (non-zero firing).
    w : ndarray of shape (m,), float64
        Firing x sample weight of the active rows (> 0).
    mult : ndarray of shape (n, B), unsigned int (uint8 unless a row is drawn over 255 times)
        Bootstrap multiplicities of every row.
    width_factor : float
        gamma of eq. 2.
    min_width : ndarray of shape (d,), float64
        Documented minimum half-width per feature (guards h = 0).
    criterion, total_weight, min_leaf
        As in `ferl.tree.gains.split_gain`.
    window : ndarray of shape (d, 2), float64
        Free interval ``(lo, hi)`` of each feature between the fuzzy bands of the ancestors' cuts
        on it: crisp cuts are searched in ``[lo + min_width, hi - min_width]`` and ``h`` is capped
        so that the new band stays inside ``[lo, hi]``. So no path cuts a feature again inside
        (or across) a band it already used.

    Returns
    -------
    feature : int (-1 when no admissible split)
    theta, h, gain : float
    """
    d = xt.shape[0]
    n_boot = mult.shape[1]
    m = rows.shape[0]
    ys, n_local = _local_classes(y, rows, n_classes)
    mult_node = np.empty((m, n_boot), dtype=mult.dtype)
    for j in range(m):
        mult_node[j] = mult[rows[j]]
    totals, wsum, sq_total = _bootstrap_totals(ys, w, mult_node, n_local)
    wt = class_totals(ys, w, n_local)
    plogp_total = plogp_sum(wt) if criterion == GAIN_ENTROPY else 0.0
    thetas = np.full(d, np.nan)
    widths = np.full(d, np.nan)
    gains = np.full(d, -np.inf)
    for f in range(d):
        lo, hi = window[f, 0] + min_width[f], window[f, 1] - min_width[f]
        if hi < lo or hi < low[f, 0] or lo > high[f, n_bins[f] - 1]:
            continue  # every cut lies between the feature's smallest and largest value
        perm, start, used = _bin_order(codes[f], rows)
        if used.shape[0] < 2:
            continue
        cuts = _bootstrap_cuts(perm, start, used, low[f], high[f], ys, w, mult_node, totals, wsum,
                               sq_total, lo, hi)
        if cuts.shape[0] == 0:
            continue
        theta = np.median(cuts)
        h = max(width_factor * np.median(np.abs(cuts - theta)), min_width[f])
        h = min(h, theta - window[f, 0], window[f, 1] - theta)
        thetas[f] = theta
        widths[f] = h
        gains[f] = shoulder_gain(xt[f], rows, ys, w, wt, plogp_total, theta - h, theta + h,
                                 criterion, total_weight, min_leaf)
    best_f = -1
    best_gain = -np.inf
    for f in range(d):
        if gains[f] > best_gain:
            best_gain = gains[f]
            best_f = f
    if best_f < 0:
        return -1, np.nan, np.nan, best_gain
    return best_f, thetas[best_f], widths[best_f], best_gain


@njit(cache=True)
def best_fixed_split(xt, y, rows, w, sets, allowed, n_classes, criterion, total_weight, min_leaf):
    """Best ``(feature, fuzzy set)`` among fixed partitions (compact variant).

    Parameters
    ----------
    xt, y, rows, w : as in `best_learned_split`.
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
    ys = y[rows]
    xs = np.empty(rows.shape[0])
    best_f = -1
    best_s = -1
    best_gain = -np.inf
    for f in range(xt.shape[0]):
        for j in range(rows.shape[0]):
            xs[j] = xt[f, rows[j]]
        for s in range(sets.shape[1]):
            if not allowed[f, s]:
                continue
            t = sets[f, s]
            gain = split_gain(xs, ys, w, t[0], t[1], t[2], t[3], n_classes, criterion,
                              total_weight, min_leaf)
            if gain > best_gain:
                best_gain = gain
                best_f = f
                best_s = s
    return best_f, best_s, best_gain


@njit(cache=True)
def split_rows(xt_f, rows, w, a, b, c, d):
    """Active rows and weights of both children of a split, and the parent's observed range.

    Parameters
    ----------
    xt_f : ndarray of shape (n,), float64
        The split feature's training values.
    rows : ndarray of shape (m,), int64
    w : ndarray of shape (m,), float64
        The parent's firing x sample weight on ``rows`` (> 0).
    a, b, c, d : float
        Trapezoid of the left child's fuzzy set.

    Returns
    -------
    left_rows, left_w, right_rows, right_w : ndarrays
        Rows where ``w mu > 0`` (left) or ``w (1 - mu) > 0`` (right), with those weights.
    lo, hi : float
        Smallest and largest split-feature value over ``rows``.
    """
    m = rows.shape[0]
    mu = np.empty(m)
    n_left = 0
    n_right = 0
    lo = np.inf
    hi = -np.inf
    for j in range(m):
        x = xt_f[rows[j]]
        lo = min(lo, x)
        hi = max(hi, x)
        mu[j] = trapezoid(x, a, b, c, d)
        n_left += w[j] * mu[j] > 0.0
        n_right += w[j] * (1.0 - mu[j]) > 0.0
    left_rows = np.empty(n_left, dtype=np.int64)
    left_w = np.empty(n_left)
    right_rows = np.empty(n_right, dtype=np.int64)
    right_w = np.empty(n_right)
    n_left = 0
    n_right = 0
    for j in range(m):
        v = w[j] * mu[j]
        if v > 0.0:
            left_rows[n_left] = rows[j]
            left_w[n_left] = v
            n_left += 1
        v = w[j] * (1.0 - mu[j])
        if v > 0.0:
            right_rows[n_right] = rows[j]
            right_w[n_right] = v
            n_right += 1
    return left_rows, left_w, right_rows, right_w, lo, hi
