"""OOD scores of a batch from its sparse firings, without the per-feature decomposition (numba).

`ferl.novelty.scores.Novelty` keeps every signal split over the features (routing loss, free-feature
anomaly, residual and naming shares, the leaf Gaussians' deviation and spread), which
`anomalous_features` and `explain` need; `ood_score` needs only the totals its kind sums. Here one
pass over the firings gives the residual ``R(x)`` and the routing mass lost ``1 - firing(x)``, and
`ferl.novelty.leaf_readout.leaf_totals` the leaf term ``T(x)``; the kinds then combine them with the
formulas of `ferl.novelty.scores.Novelty.score` (equal to its scores up to round-off: the totals are summed
node by node rather than feature by feature). It replaced the per-feature path in ``ood_score``
(``tests/ferl/test_readout_parity.py`` pins the values to it) and cut the cost of the three-call
read-out (``predict_set`` + ``evidence`` + ``ood_score``) over CART's ``predict`` by nearly half
for every variant (``python scripts/bench_scale.py --sections keel``; figures in
docs/results/speed.md).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ferl.novelty.leaf_readout import leaf_totals
from ferl.novelty.scores import FIRING_EPS, LEAF_TERM_KINDS, RESIDUAL_WEIGHT, free_gaussians
from ferl.novelty.typicality import Z_MAX, LeafGaussians
from ferl.tree.firing import Firing
from ferl.tree.fuzzy_tree import FuzzyTree

__all__ = ["TOTAL_KINDS", "score_totals"]

#: The kinds of `ferl.novelty.scores.Novelty.score` that `score_totals` computes (``"ignorance"`` is the
#: evidence's).
TOTAL_KINDS = ("leaf", "nll", "combined", "residual", "firing")


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
def _terms(X, start, count, rows, phi0, lost, feature, n_free, mean, inv_sd, residual):
    """Routing loss (n,) and, when ``residual``, ``R`` (n,) (else zeros) of sparse firings.

    ``mean[o]``, ``inv_sd[o]`` (n_nodes, d) are node ``o``'s free-feature Gaussian with 0 at its
    path features (`ferl.novelty.scores.free_gaussians`), so summing over all ``d`` features adds exact
    zeros for the path ones: a dense loop the compiler vectorises, where gathering the free
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


def score_totals(tree: FuzzyTree, leaves: LeafGaussians, X: np.ndarray, fired: Firing, kind: str,
                 want_nll: bool = False):
    """OOD score of kind ``kind`` of validated inputs from their sparse firings.

    The formulas are those of `ferl.novelty.scores.Novelty.score` (section 3.1, eq. 3 and 8, and the leaf
    Gaussians beyond the paper): with ``F = log(1 + eps) - log(eps + firing)`` where mass is lost
    (0 where none is), ``"leaf"`` is ``T / d + LEAF_RESIDUAL R + F``, ``"nll"`` ``T / d + R / 2 + F``,
    ``"combined"`` ``R / 2 + F``, ``"residual"`` ``R`` and ``"firing"`` ``1 - firing``.

    Parameters
    ----------
    tree : FuzzyTree
        A fitted tree with free-feature Gaussians.
    leaves : LeafGaussians
        Its leaf Gaussians.
    X : ndarray of shape (n_samples, n_features), float64, finite
    fired : Firing
        The sparse firings of ``X``, gates as configured.
    kind : {"leaf", "nll", "combined", "residual", "firing"}
    want_nll : bool, default=False
        Also return the per-leaf NLLs (`ferl.novelty.leaf_readout.leaf_totals`), computed in the same pass
        when ``kind`` is ``"leaf"`` or ``"nll"``.

    Returns
    -------
    score : ndarray of shape (n_samples,), float64 >= 0, finite
    nll : ndarray of shape (n_samples, L) or None
        None unless ``want_nll``.

    Raises
    ------
    ValueError
        ``kind`` not in `TOTAL_KINDS`, or a tree without free-feature Gaussians.
    """
    if kind not in TOTAL_KINDS:
        raise ValueError(f"score_totals computes the kinds {list(TOTAL_KINDS)}, not {kind!r}")
    mean, inv_sd, _, n_free = free_gaussians(tree)
    X = np.ascontiguousarray(X, dtype=np.float64)
    lost, residual = _terms(X, fired.start, fired.count, fired.rows, fired.phi0, fired.lost,
                            tree.feature, n_free, mean, inv_sd,
                            RESIDUAL_WEIGHT.get(kind, 0.0) > 0)
    nll = None
    if kind in LEAF_TERM_KINDS or want_nll:
        total, nll = leaf_totals(leaves, X, fired, want_nll)
    if kind == "firing":
        return lost, nll
    firing = np.maximum(1.0 - lost, 0.0)
    term = np.where(lost > 0.0, np.log1p(FIRING_EPS) - np.log(FIRING_EPS + firing), 0.0)
    if kind == "residual":
        return residual, nll
    score = RESIDUAL_WEIGHT[kind] * residual + term
    if kind in LEAF_TERM_KINDS:
        score += total / X.shape[1]
    return score, nll
