"""Best-first growth of a FERL fuzzy tree (paper algorithm 1, appendix B).

`grow_tree` runs the loop; the growth *policy* lives in small functions beside it: which leaves
may still split (`_may_split`), what a child may still test on its path (`_child_limits`), the
unit of the minimum fuzzy band (`_feature_spread`); the optional pruning after growth is
`ferl.tree.pruning`. The criteria are chosen in `ferl.presets`.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from ferl.tree.binning import bin_features
from ferl.tree.fuzzy_tree import SPLIT_FIXED, SPLIT_LEARNED, FuzzyTree
from ferl.tree.gains import GAIN_CCI, GAIN_ENTROPY, GAIN_GINI
from ferl.tree.pruning import cost_complexity_prune
from ferl.tree.splitter import best_fixed_split, best_learned_split, split_rows

__all__ = ["GrowthSettings", "grow_tree"]

GAINS = {"gini": GAIN_GINI, "cci": GAIN_CCI, "entropy": GAIN_ENTROPY}


@dataclass(frozen=True)
class GrowthSettings:
    """Resolved growth settings (see `FERLClassifier` for their meaning)."""

    partition: str  # "learned" | "fixed"
    gain: str  # "gini" | "cci" | "entropy"
    max_rules: int
    max_depth: int
    min_gain: float
    patience: int
    min_leaf: float  # soft weight
    n_bootstrap: int
    width_factor: float
    min_width: float  # fraction of the feature's spread (`_feature_spread`)
    prune: bool  # cost-complexity pruning after growth (`ferl.tree.pruning`)
    ccp_alpha: float  # its cost of one rule (0: only splits that change no training prediction)


@dataclass(frozen=True)
class _Candidate:
    feature: int
    fuzzy_set: int
    trap: tuple
    threshold: float
    half_width: float
    gain: float


@dataclass(frozen=True)
class _Limits:
    """What an open leaf may still test: fixed sets still open, and learned-cut windows.

    ``allowed[f, k]`` is False once set k of feature f can only add a rule living inside fuzzy bands;
    ``window[f] = (lo, hi)`` is the interval of f left free by the bands of the ancestors' learned
    cuts on f; a later cut and its band stay inside it (`ferl.tree.splitter.best_learned_split`).
    """

    allowed: np.ndarray  # (d, n_sets) bool
    window: np.ndarray  # (d, 2) float64


def _class_distribution(y, w, n_classes):
    counts = np.bincount(y, weights=w, minlength=n_classes)
    total = counts.sum()
    return counts / total if total > 0 else np.full(n_classes, 1.0 / n_classes), total


#: Percentiles whose distance is a feature's spread, the unit of ``min_width``.
_SPREAD_PERCENTILES = (1.0, 99.0)
#: Values per block of features whose percentiles `_feature_spread` takes in one call.
_SPREAD_VALUES = 1 << 20


def _feature_spread(xt: np.ndarray, positive: np.ndarray) -> np.ndarray:
    """Distance between each feature's (row's) 1st and 99th percentiles over the ``positive`` rows,
    or its range where they tie.

    The unit of the minimum half-width of learned splits: on a skewed feature (most values near 0,
    a few far outliers) a fraction of the range would put nearly every sample inside one band.
    Features are taken `_SPREAD_VALUES` values at a time (one numpy call per block, the same
    percentiles as feature by feature), so that the copy the percentiles sort stays small.
    """
    every = positive.size == xt.shape[1]
    spread = np.empty(xt.shape[0])
    step = max(1, _SPREAD_VALUES // max(positive.size, 1))
    for f0 in range(0, xt.shape[0], step):
        values = xt[f0:f0 + step] if every else xt[f0:f0 + step, positive]
        lo, hi = np.percentile(values, _SPREAD_PERCENTILES, axis=1)
        spread[f0:f0 + step] = np.where(hi > lo, hi - lo, values.max(axis=1) - values.min(axis=1))
    return spread


def _may_split(tree: FuzzyTree, node: int, settings: GrowthSettings) -> bool:
    """A leaf may split while it is above ``max_depth``, impure, and heavy enough for two children."""
    return (tree.depth[node] < settings.max_depth and tree.value[node].max() < 1.0
            and tree.weight[node] >= 2.0 * settings.min_leaf)


def _child_limits(limits: _Limits, cand: _Candidate, left: bool) -> _Limits:
    """The limits of a child of a node split by ``cand`` (``left``: the "f is S" child).

    Fixed partitions are Ruspini partitions: after "f is S" every other set of f meets the child
    only inside fuzzy bands, so f is closed; after "f is not S", S alone is closed. A learned cut
    ``theta +- h`` confines the later cuts on f and their bands to ``<= theta - h`` in the "<="
    child and to ``>= theta + h`` in the ">" child, so no path cuts f again inside, or across, a
    band it already used; without the limits a tree printed rules such as "x9 > 3.44 +- 0.59 AND x9
    <= 3.44 +- 0.59" and conditions such as "x12 is between 584 and 787 (membership <= 0.70)" that
    live only in two bands.
    """
    allowed, window = limits.allowed, limits.window
    f = cand.feature
    if cand.fuzzy_set >= 0:
        allowed = allowed.copy()
        if left:
            allowed[f] = False
        else:
            allowed[f, cand.fuzzy_set] = False
    else:
        window = window.copy()
        if left:
            window[f, 1] = min(window[f, 1], cand.threshold - cand.half_width)
        else:
            window[f, 0] = max(window[f, 0], cand.threshold + cand.half_width)
    return _Limits(allowed, window)


def _multiplicities(rng, positive: np.ndarray, n: int, n_bootstrap: int) -> np.ndarray:
    """Bootstrap multiplicities (n, n_bootstrap) of the rows: ``len(positive)`` draws with
    replacement among the ``positive`` rows per resample, as uint8 (a row drawn more than 255
    times, which a bootstrap practically never does, widens the type)."""
    mult = np.empty((n, n_bootstrap), dtype=np.uint8)
    for b in range(n_bootstrap):
        counts = np.bincount(positive[rng.integers(0, len(positive), len(positive))], minlength=n)
        if counts.max() > np.iinfo(mult.dtype).max:
            mult = mult.astype(np.min_scalar_type(counts.max()))
        mult[:, b] = counts
    return mult


class _Grower:
    """Per-fit precomputations and per-node work of the split search.

    Holds the inputs seen feature-major (a transposed view of X, no copy), the bin codes
    (`ferl.tree.binning`), the bootstrap multiplicities and the fixed partitions. A node is represented
    by its active rows (non-zero firing) and their firing x sample weight, so a node costs
    O(active rows) in time and memory.
    """

    def __init__(self, X, y, sample_weight, n_classes, settings: GrowthSettings, rng, sets):
        self.y = y
        self.n_classes = n_classes
        self.s = settings
        self.total = float(sample_weight.sum())
        self.crit = GAINS[settings.gain]
        self.sets = sets
        self.xt = X.T  # a view: the kernels read a node's rows one feature at a time
        positive = np.flatnonzero(sample_weight > 0)
        self.root = (positive, sample_weight[positive])
        if settings.partition == "learned":
            # Resamples are drawn over the positive-weight rows only, so zero-weight rows are
            # exactly equivalent to absent rows.
            n = X.shape[0]
            self.bins = bin_features(self.xt, positive)
            self.mult = _multiplicities(rng, positive, n, settings.n_bootstrap)
            self.min_width = np.maximum(settings.min_width * _feature_spread(self.xt, positive),
                                        np.finfo(np.float64).tiny)

    def candidate(self, rows, w, limits: _Limits) -> _Candidate | None:
        """Best split of the node with active ``rows`` and weights ``w``, or None."""
        s = self.s
        if s.partition == "learned":
            b = self.bins
            f, theta, h, gain = best_learned_split(
                b.codes, b.low, b.high, b.n_bins, self.xt, self.y, rows, w, self.mult,
                self.n_classes, s.width_factor, self.min_width, self.crit, self.total, s.min_leaf,
                limits.window,
            )
            if f < 0 or not np.isfinite(gain):
                return None
            inf = np.inf
            return _Candidate(int(f), -1, (-inf, -inf, theta - h, theta + h), theta, h, gain)
        f, k, gain = best_fixed_split(
            self.xt, self.y, rows, w, self.sets, limits.allowed, self.n_classes, self.crit, self.total,
            s.min_leaf,
        )
        if f < 0 or not np.isfinite(gain):
            return None
        return _Candidate(int(f), int(k), tuple(self.sets[f, k]), np.nan, np.nan, gain)

    def split(self, rows, w, cand: _Candidate):
        """Children's ``(rows, weights)`` (left "f is S", right "f is not S") and the node's
        observed range ``(lo, hi)`` of the split feature."""
        lr, lw, rr, rw, lo, hi = split_rows(self.xt[cand.feature], rows, w, *cand.trap)
        return (lr, lw), (rr, rw), lo, hi

    def distribution(self, rows, w):
        """Class distribution and soft weight of a node."""
        return _class_distribution(self.y[rows], w, self.n_classes)


def grow_tree(X, y, sample_weight, n_classes, settings: GrowthSettings, rng, sets=None):
    """Grow a fuzzy tree best-first under a rule budget (paper algorithm 1).

    Each leaf's best split is scored once, when the leaf is created (a leaf's candidates depend only
    on its own firing, so rescoring every leaf at every iteration, as algorithm 1 is written, gives
    the same tree). The leaf with the largest gain is split next; a split whose gain is
    ``<= min_gain`` is still installed while fewer than ``patience`` such splits have been made,
    after which growth stops. Growth also stops at ``max_rules`` leaves or when no leaf above
    depth ``max_depth`` has an admissible split (both children at least ``min_leaf`` soft weight).
    Pure leaves are not split. No path cuts a feature again inside a fuzzy band it already used
    (`_child_limits`). With ``settings.prune`` the tree is pruned after growth at
    ``settings.ccp_alpha`` (`ferl.tree.pruning.cost_complexity_prune`).

    Parameters
    ----------
    X : ndarray of shape (n, d), float64, finite
    y : ndarray of shape (n,), int64 in ``[0, n_classes)``
    sample_weight : ndarray of shape (n,), float64, >= 0
    settings : GrowthSettings
    rng : numpy.random.Generator
        Draws the bootstrap multiplicities (once per fit).
    sets : ndarray of shape (d, 3, 4) or None
        Fixed partitions (required when ``settings.partition == "fixed"``).

    Returns
    -------
    FuzzyTree
        Finalised flat arrays; node 0 is the root.
    """
    grower = _Grower(X, y, sample_weight, n_classes, settings, rng, sets)
    tree = FuzzyTree(n_classes=n_classes)
    value, weight = _class_distribution(y, sample_weight, n_classes)
    tree.add_node(-1, 0, value, weight)
    firing = {0: grower.root}  # open leaf -> (active rows, firing x sample weight)
    d = X.shape[1]
    n_sets = 0 if sets is None else sets.shape[1]
    window = np.tile(np.array([-np.inf, np.inf]), (d, 1))
    limits = {0: _Limits(np.ones((d, n_sets), dtype=bool), window)}  # per open leaf
    heap: list = []

    def consider(node: int) -> None:
        if not _may_split(tree, node, settings):
            return
        cand = grower.candidate(*firing[node], limits[node])
        if cand is not None:
            heapq.heappush(heap, (-cand.gain, node, cand))

    consider(0)
    n_leaves = 1
    non_improving = 0
    while heap and n_leaves < settings.max_rules:
        neg_gain, node, cand = heapq.heappop(heap)
        if -neg_gain <= settings.min_gain:
            non_improving += 1
            if non_improving > settings.patience:
                break
        rows, w = firing.pop(node)
        node_limits = limits.pop(node)
        left, right, lo, hi = grower.split(rows, w, cand)
        tree.feature[node] = cand.feature
        tree.kind[node] = SPLIT_FIXED if cand.fuzzy_set >= 0 else SPLIT_LEARNED
        tree.fuzzy_set[node] = cand.fuzzy_set
        tree.trap[node] = np.asarray(cand.trap, dtype=np.float64)
        tree.threshold[node] = cand.threshold
        tree.half_width[node] = cand.half_width
        tree.gain[node] = cand.gain
        tree.lo[node] = lo
        tree.hi[node] = hi
        depth = tree.depth[node] + 1
        for side, child_samples in (("left", left), ("right", right)):
            value, weight = grower.distribution(*child_samples)
            child = tree.add_node(node, depth, value, weight)
            getattr(tree, side)[node] = child
            firing[child] = child_samples
            limits[child] = _child_limits(node_limits, cand, side == "left")
            consider(child)
        n_leaves += 1
    tree = tree.finalize()
    return cost_complexity_prune(tree, settings.ccp_alpha) if settings.prune else tree

