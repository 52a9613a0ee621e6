"""The paper's free-feature Gaussians (eq. 3): per node, a firing-weighted Gaussian of every feature
off the node's root-to-node path, with a variance floor; the fit-time check that keeps every
novelty score finite on any feature scale; and the residual along each leaf's path, at inference
and cross-fitted on the training rows (numba).

**The path residual** (beyond the paper: the second term of the leaf typicality that drives the
per-source evidence discount, `ferl.novelty.discount.leaf_typicality`). For leaf ``l`` and input
``x``, ``R_l(x)`` is the mean over the nodes ``o`` of ``l``'s root-to-leaf path that have a free
feature of ``r_o(x) = mean_{f free at o} z_of(x)^2``, ``z_of`` the standardised distance to the
node's free-feature Gaussian (variance floor ``VAR_FLOOR`` times the root's). It is the residual
``R`` of `ferl.novelty.scores` restricted to one rule: for an input that reaches one leaf crisply,
``R_l(x) = R(x)``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ferl.novelty.cross_fit import WALK_BLOCK, walk_block
from ferl.novelty.linalg import Z_MAX
from ferl.tree.firing import Firing
from ferl.tree.fuzzy_tree import FuzzyTree

__all__ = ["MIN_VARIANCE", "VAR_FLOOR", "check_variances", "fit_free_gaussians",
           "free_gaussians", "free_scores", "path_residual", "residual_totals", "routing_loss",
           "standardisation", "weighted_moments"]

#: Variance floor of the free-feature Gaussians, as a fraction of the feature's training variance
#: (a feature constant over the whole training set uses 1 instead of its variance): a feature
#: constant within a node gets ``sigma^2 = VAR_FLOOR * var_f`` and hence a finite score. The
#: leave-one-class-out ranking hardly depends on it between 1e-3 and 1e-1 (docs/results/novelty.md).
VAR_FLOOR = 1e-2
#: Smallest training variance of a non-constant feature that `fit` accepts: below it the floored
#: variance would leave float64's normal range (a feature scaled by 1e-160 gave inf / NaN scores).
MIN_VARIANCE = np.finfo(np.float64).tiny / VAR_FLOOR


@njit(cache=True)
def weighted_moments(X, sw, shift, unit, total):
    """Weighted mean and standard deviation per feature of ``V = (X - shift) / unit``, without a
    copy of ``X``: the values of ``np.average(V, axis=0, weights=sw)`` and ``sqrt(np.average((V -
    mean) ** 2, axis=0, weights=sw))``, bit for bit (rows summed in order, as numpy reduces axis 0),
    except that rows of weight 0 are skipped (numpy gives NaN where such a row's value overflows).

    Parameters
    ----------
    X : ndarray of shape (n, d), float64
    sw : ndarray of shape (n,), float64, >= 0
    shift, unit : ndarray of shape (d,), float64 (``unit`` non-zero)
    total : float
        ``sw.sum()`` (> 0).

    Returns
    -------
    mean, sd : ndarray of shape (d,), float64 (inf or NaN where a sum overflows)
    """
    n, d = X.shape
    acc = np.zeros(d)
    for i in range(n):
        if sw[i] == 0.0:  # adds nothing, but 0 * inf (a huge value of weight 0) is NaN
            continue
        for f in range(d):
            acc[f] += (X[i, f] - shift[f]) / unit[f] * sw[i]
    mean = acc / total
    acc[:] = 0.0
    for i in range(n):
        if sw[i] == 0.0:
            continue
        for f in range(d):
            z = (X[i, f] - shift[f]) / unit[f] - mean[f]
            acc[f] += z * z * sw[i]
    return mean, np.sqrt(acc / total)


def standardisation(X: np.ndarray, sw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The leaf Gaussians' standardisation (beyond the paper): the weighted mean and standard
    deviation of every feature, computed without overflow or underflow.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features), float64, finite
    sw : ndarray of shape (n_samples,), float64 >= 0, some > 0
        Rows of weight 0 are not read.

    Returns
    -------
    center, scale : ndarray of shape (n_features,), float64, finite; ``scale > 0`` (1 for a
        constant feature)

    Raises
    ------
    ValueError
        A feature whose spread is positive but below float64's smallest normal number (the message
        names it).
    """
    rows = (sw > 0)[:, None]  # the range of the positive-weight rows, without copying them
    lo = X.min(axis=0, where=rows, initial=np.inf)
    hi = X.max(axis=0, where=rows, initial=-np.inf)
    mid = lo / 2 + hi / 2
    half = hi / 2 - lo / 2
    unit = np.where(half > 0, half, 1.0)
    # moments of V = (X - mid) / unit, in [-1, 1] on the rows of positive weight, without a copy
    m, sd = weighted_moments(np.ascontiguousarray(X, dtype=np.float64), sw, mid, unit, sw.sum())
    tiny = np.finfo(np.float64).tiny
    bad = (half > 0) & ((half < tiny) | (sd * unit < tiny) | (sd == 0))
    if bad.any():
        raise ValueError(
            f"feature(s) {np.flatnonzero(bad).tolist()[:10]} vary by less than float64 can standardise "
            f"(spread below {tiny:.3g}); rescale X (e.g. standardise it) before fitting")
    return mid + unit * m, np.where(half > 0, sd * unit, 1.0)


@njit(cache=True)
def _node_sums(start, count, rows, phi0, sw, X, center, scale):
    """Per node, the weighted count, sum and sum of squares of the standardised ``(X - center) /
    scale`` over the entries that reach it (standardised row by row: no copy of ``X``)."""
    n_nodes = start.shape[0]
    d = X.shape[1]
    s0 = np.zeros(n_nodes)
    s1 = np.zeros((n_nodes, d))
    s2 = np.zeros((n_nodes, d))
    for o in range(n_nodes):
        for q in range(start[o], start[o] + count[o]):
            r = rows[q]
            w = phi0[q] * sw[r]
            if w == 0.0:  # adds nothing, but 0 * inf (a huge value of weight 0) is NaN
                continue
            s0[o] += w
            for f in range(d):
                z = (X[r, f] - center[f]) / scale[f]
                s1[o, f] += w * z
                s2[o, f] += w * z * z
    return s0, s1, s2


def fit_free_gaussians(tree: FuzzyTree, X: np.ndarray, sample_weight: np.ndarray, firing: Firing,
                       path: np.ndarray) -> FuzzyTree:
    """Fit the per-node free-feature Gaussians of paper eq. 3 and store them in ``tree``.

    The weights ``w_i phi_o(x_i)`` (sample weight times training firing, gates off: equal to the
    gated firing on the training set) give the mean ``mu_of`` and population variance
    ``sigma_of^2`` of every feature ``f`` absent from node ``o``'s path (path features: NaN). Sums
    are accumulated on standardised features over the sparse firing (`ferl.tree.firing.Firing`), each
    row standardised as it is read (no copy of ``X``).

    Parameters
    ----------
    tree : FuzzyTree
        A finalised tree; ``tree.free_mean`` and ``tree.free_var`` are set in place.
    X : ndarray of shape (n_samples, n_features), float64, finite
        The training inputs.
    sample_weight : ndarray of shape (n_samples,), float64, >= 0
    firing : Firing
        The ungated sparse firing of ``X`` (its ``phi0`` is read).
    path : ndarray of shape (n_nodes, n_features), bool
        The features tested on each node's path (`FuzzyTree.path_mask`).

    Returns
    -------
    FuzzyTree
        ``tree``, with ``free_mean`` and ``free_var`` of shape (n_nodes, n_features), float64
        (infinite or NaN where a variance overflows: `check_variances` rejects those).
    """
    d = X.shape[1]
    sw = np.asarray(sample_weight, dtype=np.float64)
    X = np.ascontiguousarray(X, dtype=np.float64)
    # the mean as an offset from the heaviest row: a row holding all but 1e-150 of the weight
    # sits exactly at the centre, not at the mean's rounding error (which outweighs the spread)
    ref = X[np.argmax(sw)]
    offset, scale = weighted_moments(X, sw, ref, np.ones(d), sw.sum())
    center = ref + offset
    scale = np.where(scale > 0, scale, 1.0)
    s0, s1, s2 = _node_sums(firing.start, firing.count, firing.rows, firing.phi0, sw, X, center, scale)
    with np.errstate(over="ignore", invalid="ignore"):
        total = np.where(s0 > 0, s0, 1.0)[:, None]
        mean_z = s1 / total
        var_z = np.maximum(s2 / total - mean_z**2, 0.0)
        tree.free_mean = np.where(path, np.nan, center + scale * mean_z)
        tree.free_var = np.where(path, np.nan, scale**2 * var_z)
    return tree


def check_variances(tree: FuzzyTree, feature_range: np.ndarray, feature_names) -> None:
    """Raise ValueError naming the features whose training variance float64 cannot hold.

    A non-constant feature (``feature_range`` lo < hi) needs a finite root variance of at least
    `MIN_VARIANCE`; with it every novelty score is finite for every finite input.

    Parameters
    ----------
    tree : FuzzyTree
        With free-feature Gaussians (`fit_free_gaussians`).
    feature_range : ndarray of shape (n_features, 2)
        Training minimum and maximum per feature.
    feature_names : sequence of str
    """
    root_mean, root_var = tree.free_mean[0], tree.free_var[0]
    varies = feature_range[:, 1] > feature_range[:, 0]
    bad = ~np.isfinite(root_mean) | ~np.isfinite(root_var) | (varies & ~(root_var >= MIN_VARIANCE))
    if bad.any():
        names = [feature_names[j] for j in np.flatnonzero(bad)]
        values = ", ".join(f"{v:.3g}" for v in root_var[bad][:10])
        raise ValueError(
            f"the variance of feature(s) {names[:10]} ({values}) overflows or underflows float64 "
            f"(it must be finite and at least {MIN_VARIANCE:.3g} for finite novelty scores); rescale X "
            f"(e.g. standardise it) before fitting"
        )


def free_gaussians(tree: FuzzyTree) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Free-feature means and inverse standard deviations floored at `VAR_FLOOR` times the root's variance
    (n_nodes, d; 0 at path features), the free mask (n_nodes, d) and count per node (kept on the tree)."""
    return tree.derived("free_gaussians", (tree.free_mean, tree.free_var), lambda: _inverse_sd(tree))


def _inverse_sd(tree: FuzzyTree) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    free = ~np.isnan(tree.free_var)
    root_var = tree.free_var[0]
    floor = np.maximum(VAR_FLOOR * np.where(root_var > 0, root_var, 1.0), np.finfo(np.float64).tiny)
    var = np.maximum(np.where(free, tree.free_var, 1.0), floor)
    inv_sd = np.where(free, 1.0 / np.sqrt(var), 0.0)
    return np.where(free, tree.free_mean, 0.0), inv_sd, free, free.sum(axis=1).astype(np.int64)


@njit(cache=True)
def path_residual(X, start, count, rows, phi0, leaves, parent, mean, inv_sd, free, n_free, z_max):
    """``R_l(x_i)`` of every leaf ``l`` (column ``j`` for node ``leaves[j]``) that row ``i`` reaches
    with a positive ungated firing ``phi0`` (sparse firings, `ferl.tree.firing.Firing`); 0 elsewhere.

    ``mean``, ``inv_sd`` (n_nodes, d): the free-feature Gaussians with their floored inverse
    standard deviations, ``free`` (n_nodes, d) bool, ``n_free`` (n_nodes,) (`ferl.novelty.scores`).
    Returns an ndarray of shape (n, L), float64 >= 0, finite for finite ``X``. A leaf's rows are
    taken `ferl.novelty.cross_fit.WALK_BLOCK` at a time (`ferl.novelty.cross_fit.walk_block`).
    """
    out = np.zeros((X.shape[0], leaves.shape[0]))
    picked = np.empty(count.max(), dtype=np.int64)
    Z, acc, res = np.empty((X.shape[1], WALK_BLOCK)), np.empty(WALK_BLOCK), np.empty(WALK_BLOCK)
    for j in range(leaves.shape[0]):
        o = leaves[j]
        n_o = 0
        for e in range(start[o], start[o] + count[o]):
            if phi0[e] > 0.0:
                picked[n_o] = rows[e]
                n_o += 1
        for b0 in range(0, n_o, WALK_BLOCK):
            nb = min(WALK_BLOCK, n_o - b0)
            for i in range(nb):
                Z[:, i] = X[picked[b0 + i]]
            walk_block(Z, nb, o, parent, mean, inv_sd, free, n_free, z_max, acc, res)
            for i in range(nb):
                out[picked[b0 + i], j] = res[i]
    return out


#: Floating-point freedoms of the residual's kernel: reassociating each (row, node) pair's sum of
#: squared distances lets it run in SIMD lanes (round-off only; no finite-math assumption).
_SUM_FREEDOMS = {"reassoc", "nsz", "contract"}


@njit(cache=True, fastmath=_SUM_FREEDOMS, inline="always")
def _z2(x, mu, inv_sd):
    z = min(abs((x - mu) * inv_sd), Z_MAX)
    return z * z


@njit(cache=True, fastmath=_SUM_FREEDOMS, inline="always")
def _add(num, den, i, p, acc, m):
    if p > 0.0:
        num[i] += p * acc / m
        den[i] += p


@njit(cache=True, fastmath=_SUM_FREEDOMS)
def residual_totals(X, start, count, rows, phi0, lost, feature, n_free, mean, inv_sd, residual):
    """Routing loss (n,) and, when ``residual``, ``R`` (n,) (else zeros) of sparse firings.

    ``mean[o]``, ``inv_sd[o]`` (n_nodes, d) are node ``o``'s free-feature Gaussian with 0 at its
    path features (`free_gaussians`), so summing over all ``d`` features adds exact zeros for the
    path ones: a dense loop the compiler vectorises, where gathering the free
    features one by one was bound by the latency of its additions (``R`` moves by round-off
    only). A node's entries are taken four at a time, sharing the node's loads and summing side
    by side. Timings at 10^5 rows: docs/results/speed.md.
    """
    n, d = X.shape
    loss = np.zeros(n)
    num = np.zeros(n)
    den = np.zeros(n)
    for o in range(start.shape[0]):
        s, k = start[o], count[o]
        if feature[o] >= 0:
            for e in range(s, s + k):
                if lost[e] > 0.0:
                    loss[rows[e]] += lost[e]
        m = n_free[o]
        if not residual or m == 0:
            continue
        tail = s + k - k % 4
        for e in range(s, tail, 4):
            i0, i1, i2, i3 = rows[e], rows[e + 1], rows[e + 2], rows[e + 3]
            a0 = a1 = a2 = a3 = 0.0
            for f in range(d):
                mu, sd = mean[o, f], inv_sd[o, f]
                a0 += _z2(X[i0, f], mu, sd)
                a1 += _z2(X[i1, f], mu, sd)
                a2 += _z2(X[i2, f], mu, sd)
                a3 += _z2(X[i3, f], mu, sd)
            _add(num, den, i0, phi0[e], a0, m)
            _add(num, den, i1, phi0[e + 1], a1, m)
            _add(num, den, i2, phi0[e + 2], a2, m)
            _add(num, den, i3, phi0[e + 3], a3, m)
        for e in range(tail, s + k):
            i = rows[e]
            acc = 0.0
            for f in range(d):
                acc += _z2(X[i, f], mean[o, f], inv_sd[o, f])
            _add(num, den, i, phi0[e], acc, m)
    for i in range(n):
        if den[i] > 0.0:
            num[i] /= den[i]
    return loss, num


@njit(cache=True)
def free_scores(X, start, count, rows, phi0, mean, inv_sd, free, n_free, shallow):
    """Firing-weighted free-feature scores over all nodes (see `Novelty`).

    The firings are sparse (`ferl.tree.firing.sparse_firing`): node ``o`` is reached by the samples
    ``rows[start[o]:start[o] + count[o]]`` with ungated firings ``phi0``; nodes are taken in index
    order. Returns ``anomaly`` (n, d): per feature, the ``phi0``-weighted mean of ``z_of^2`` over
    the nodes where ``f`` is free; ``share`` (n, d): feature ``f``'s part of the residual,
    ``sum_o phi0_o z_of^2 / n_free_o / sum_o phi0_o`` over nodes with a free feature (rows sum to
    the residual); ``naming`` (n, d): the same over the nodes where ``shallow`` is True only.
    ``|z|`` is clipped to `Z_MAX`, so all three are finite for finite inputs.
    """
    n, d = X.shape
    anomaly = np.zeros((n, d))
    share = np.zeros((n, d))
    naming = np.zeros((n, d))
    weight = np.zeros((n, d))
    node_weight = np.zeros(n)
    shallow_weight = np.zeros(n)
    for o in range(start.shape[0]):
        if n_free[o] == 0:
            continue
        for e in range(start[o], start[o] + count[o]):
            i = rows[e]
            p = phi0[e]
            if p <= 0.0:
                continue
            for f in range(d):
                if free[o, f]:
                    z = min(abs((X[i, f] - mean[o, f]) * inv_sd[o, f]), Z_MAX)
                    z2 = z * z
                    anomaly[i, f] += p * z2
                    share[i, f] += p * z2 / n_free[o]
                    if shallow[o]:
                        naming[i, f] += p * z2 / n_free[o]
                    weight[i, f] += p
            node_weight[i] += p
            if shallow[o]:
                shallow_weight[i] += p
    for i in range(n):
        for f in range(d):
            if weight[i, f] > 0.0:
                anomaly[i, f] /= weight[i, f]
            if node_weight[i] > 0.0:
                share[i, f] /= node_weight[i]
            if shallow_weight[i] > 0.0:
                naming[i, f] /= shallow_weight[i]
    return anomaly, share, naming


@njit(cache=True)
def routing_loss(start, count, rows, lost, feature, n, d):
    """The routing mass lost at the gates (appendix eq. 8) of sparse firings (``start``, ``count``,
    ``rows``, ``lost``, `ferl.tree.firing.Firing`) of ``n`` inputs: summed by split feature (n, d) and
    in total (n,), float64 >= 0, nodes in index order."""
    loss = np.zeros((n, d))
    total = np.zeros(n)
    for o in range(start.shape[0]):
        if feature[o] < 0:
            continue
        for e in range(start[o], start[o] + count[o]):
            if lost[e] > 0.0:
                loss[rows[e], feature[o]] += lost[e]
                total[rows[e]] += lost[e]
    return loss, total
