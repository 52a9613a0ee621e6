"""Flat-array fuzzy tree: the fitted node arrays and the per-tree operations on them.

A fitted FERL tree is a set of parallel arrays, one row per node, in creation order (a parent always
precedes its children). Every internal node tests one feature with one fuzzy set given as a
trapezoid ``(a, b, c, d)``: the left child receives the membership ``mu(x_f)`` ("f is S") and the
right child ``1 - mu(x_f)`` ("f is not S"). A learned split "x_f <= theta +- h" (paper eq. 1) is the
trapezoid ``(-inf, -inf, theta - h, theta + h)``; the fixed low / medium / high partitions of the
compact variant are ordinary trapezoids (`ferl.tree.membership`). Firing is in `ferl.tree.firing`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ferl.tree.firing import Firing, Scratch, sparse_firing, training_firing
from ferl.tree.membership import membership, support_gate, trapezoid

__all__ = ["FuzzyTree", "trapezoid", "membership", "support_gate"]

NO_CHILD = -1
SPLIT_LEARNED = 0
SPLIT_FIXED = 1


@dataclass
class FuzzyTree:
    """Parallel node arrays of a fitted fuzzy tree (one row per node, parents before children).

    Attributes
    ----------
    feature : ndarray of shape (n_nodes,), int64
        Split feature, -1 at leaves.
    kind : ndarray of shape (n_nodes,), int64
        0 = learned ramp split (eq. 1), 1 = fixed fuzzy set (compact variant), -1 at leaves.
    fuzzy_set : ndarray of shape (n_nodes,), int64
        Index of the fixed set (0 low, 1 medium, 2 high) for fixed splits, else -1.
    trap : ndarray of shape (n_nodes, 4), float64
        Left child's trapezoid ``(a, b, c, d)``; for learned splits ``(-inf, -inf, theta-h, theta+h)``.
    threshold, half_width : ndarray of shape (n_nodes,), float64
        theta and h of learned splits (eq. 1-2); NaN elsewhere.
    left, right, parent, depth : ndarray of shape (n_nodes,), int64
    value : ndarray of shape (n_nodes, n_classes), float64
        Consequent class distribution p_o (rows sum to 1).
    weight : ndarray of shape (n_nodes,), float64
        Soft support: sum of training firing x sample weight.
    lo, hi : ndarray of shape (n_nodes,), float64
        Range of the split feature over training samples with non-zero firing (internal nodes).
    gain : ndarray of shape (n_nodes,), float64
        Gain of the split installed at the node (NaN at leaves).
    free_mean, free_var : ndarray of shape (n_nodes, n_features), float64, or None
        Free-feature Gaussians of paper eq. 3 (`ferl.novelty.free_gaussians.fit_free_gaussians`):
        firing-weighted mean and variance of every feature absent from the node's root-to-node path,
        NaN for path features. None until fitted.
    """

    n_classes: int
    feature: list = field(default_factory=list)
    kind: list = field(default_factory=list)
    fuzzy_set: list = field(default_factory=list)
    trap: list = field(default_factory=list)
    threshold: list = field(default_factory=list)
    half_width: list = field(default_factory=list)
    left: list = field(default_factory=list)
    right: list = field(default_factory=list)
    parent: list = field(default_factory=list)
    depth: list = field(default_factory=list)
    value: list = field(default_factory=list)
    weight: list = field(default_factory=list)
    lo: list = field(default_factory=list)
    hi: list = field(default_factory=list)
    gain: list = field(default_factory=list)
    free_mean: np.ndarray | None = None
    free_var: np.ndarray | None = None

    #: Per-node arrays grown by `add_node`.
    ARRAY_FIELDS = (
        "feature", "kind", "fuzzy_set", "trap", "threshold", "half_width", "left", "right",
        "parent", "depth", "value", "weight", "lo", "hi", "gain",
    )
    #: Every array a saved model stores.
    SAVED_FIELDS = ARRAY_FIELDS + ("free_mean", "free_var")
    INT_FIELDS = ("feature", "kind", "fuzzy_set", "left", "right", "parent", "depth")

    def add_node(self, parent: int, depth: int, value: np.ndarray, weight: float) -> int:
        """Append a leaf and return its index."""
        self.feature.append(NO_CHILD)
        self.kind.append(-1)
        self.fuzzy_set.append(-1)
        self.trap.append(np.full(4, np.nan))
        self.threshold.append(np.nan)
        self.half_width.append(np.nan)
        self.left.append(NO_CHILD)
        self.right.append(NO_CHILD)
        self.parent.append(parent)
        self.depth.append(depth)
        self.value.append(np.asarray(value, dtype=np.float64))
        self.weight.append(float(weight))
        self.lo.append(np.nan)
        self.hi.append(np.nan)
        self.gain.append(np.nan)
        return len(self.feature) - 1

    def finalize(self) -> FuzzyTree:
        """Convert the growing lists into contiguous numpy arrays (in place) and return self."""
        for name in self.ARRAY_FIELDS:
            dtype = np.int64 if name in self.INT_FIELDS else np.float64
            values = getattr(self, name)
            arr = np.asarray(values, dtype=dtype)
            if name == "trap":
                arr = arr.reshape(-1, 4)
            if name == "value":
                arr = arr.reshape(-1, self.n_classes)
            setattr(self, name, np.ascontiguousarray(arr))
        return self

    @property
    def n_nodes(self) -> int:
        return len(self.feature)

    @property
    def is_leaf(self) -> np.ndarray:
        """Boolean mask of shape (n_nodes,): True at leaves (rules)."""
        return np.asarray(self.feature) < 0

    def margins(self, margin_factor: float, min_width: float, feature_range: np.ndarray) -> np.ndarray:
        """Gate margin per node (section 3.1, appendix C.2): ``margin_factor * (hi - lo)``, floored by
        ``min_width`` times the split feature's training range (and float64's smallest normal
        number: a node whose observed range is a single value). Kept on the tree (`derived`).

        Parameters
        ----------
        margin_factor : float > 0
            Margin as a multiple of the node-local observed range (paper default 1.0).
        min_width : float > 0
            The floor, as a fraction of the feature's training range.
        feature_range : ndarray of shape (n_features, 2), float64
            Each feature's training minimum and maximum.

        Returns
        -------
        ndarray of shape (n_nodes,), float64 > 0
        """
        def compute():
            span = feature_range[:, 1] - feature_range[:, 0]
            min_margin = np.maximum(min_width * span, np.finfo(np.float64).tiny)
            width = np.nan_to_num(self.hi - self.lo, nan=0.0)
            return np.maximum(margin_factor * width, min_margin[np.maximum(self.feature, 0)])

        inputs = (self.lo, self.hi, self.feature, feature_range, margin_factor, min_width)
        return self.derived("margin", inputs, compute)

    def derived(self, name: str, inputs: tuple, compute):
        """``compute()``, kept on the tree while ``inputs`` are unchanged (arrays by identity,
        other values by equality), so inference does not redo per-tree work on every call.

        The fitted arrays are never changed in place; replacing one (as fitting or loading does)
        invalidates what was derived from it.
        """
        cache = self.__dict__.setdefault("_derived", {})
        hit = cache.get(name)
        if hit is not None and len(hit[0]) == len(inputs) and all(
                a is b if isinstance(a, np.ndarray) else a == b
                for a, b in zip(hit[0], inputs, strict=True)):
            return hit[1]
        value = compute()
        cache[name] = (inputs, value)
        return value

    def kernel_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``lo``, ``hi`` and ``trap`` as the firing kernels read them: the leaves' NaNs set to 0,
        the learned splits' infinite shoulders kept (``np.nan_to_num`` would make them +-1.8e308,
        which hid them from the kernels' branch-free path, `ferl.tree.firing.is_ramp`)."""
        return self.derived("kernel", (self.lo, self.hi, self.trap), lambda: tuple(
            np.nan_to_num(a, nan=0.0, posinf=np.inf, neginf=-np.inf)
            for a in (self.lo, self.hi, self.trap)))

    def sparse_firing(self, X: np.ndarray, gates: bool, margin: np.ndarray,
                      scratch: Scratch | None = None) -> Firing:
        """Sparse firings of the rows of ``X`` (n, n_features); see `sparse_firing`. With a
        ``scratch``, the entries are written into its buffers (grown there when they outgrow
        them) and the result is a view, valid until the next call with the same scratch."""
        lo, hi, trap = self.kernel_arrays()
        X = np.ascontiguousarray(X, dtype=np.float64)
        own = scratch if scratch is not None else Scratch()
        start, count, own.rows, own.phi, own.phi0, own.lost, e = sparse_firing(
            X, self.feature, trap, self.left, self.right, lo, hi,
            np.ascontiguousarray(margin, dtype=np.float64), gates, own.rows, own.phi, own.phi0, own.lost)
        return Firing(start, count, own.rows[:e], own.phi[:e], own.phi0[:e], own.lost[:e],
                      n_samples=X.shape[0])

    def training_firing(self, X: np.ndarray) -> Firing:
        """Ungated sparse firings of the training rows ``X`` (n, n_features) in exact-size, slim
        buffers, for the fit's Gaussians and rule shares; see `ferl.tree.firing.training_firing`."""
        trap = self.kernel_arrays()[2]
        return training_firing(np.ascontiguousarray(X, dtype=np.float64), self.feature, trap,
                               self.left, self.right)

    def firing(self, X: np.ndarray, gates: bool, margin: np.ndarray):
        """Dense firing ``phi`` (n, n_nodes) and gate losses ``lost`` (n, n_nodes); see
        `sparse_firing`. Memory grows as n x n_nodes: batch large inputs."""
        fired = self.sparse_firing(X, gates, margin)
        return fired.dense(fired.phi), fired.dense(fired.lost)

    def path_mask(self, n_features: int) -> np.ndarray:
        """Features tested on each node's root-to-node path.

        Returns
        -------
        ndarray of shape (n_nodes, n_features), bool
            ``mask[o, f]`` is True when an ancestor of ``o`` splits on ``f`` (the complement is the
            set of free features of paper eq. 3).
        """
        mask = np.zeros((self.n_nodes, n_features), dtype=bool)
        for o in range(1, self.n_nodes):
            p = self.parent[o]
            mask[o] = mask[p]
            mask[o, self.feature[p]] = True
        return mask

    def structure_problem(self, n_features: int) -> str | None:
        """The first structural inconsistency of the node arrays, or None when they are sound.

        The numba kernels index the node arrays without bounds checks, so a loaded tree is
        checked before any inference: array shapes and dtypes, children after their parent and
        inside the tree, parents matching children, features inside ``[0, n_features)``, class
        distributions finite and summing to 1, internal nodes with a fuzzy set and a finite range.
        """
        n = len(self.feature)
        shapes = {k: (n,) for k in FuzzyTree.ARRAY_FIELDS}
        shapes.update(trap=(n, 4), value=(n, self.n_classes), free_mean=(n, n_features),
                      free_var=(n, n_features))
        for k, shape in shapes.items():
            arr = getattr(self, k)
            kind = "i" if k in FuzzyTree.INT_FIELDS else "f"
            if arr.shape != shape or arr.dtype.kind != kind:
                return (f"tree array {k!r} has shape {arr.shape} and dtype {arr.dtype}, expected {shape}, "
                        f"{'integer' if kind == 'i' else 'float'}")
        if n < 1:
            return "the tree has no node"
        internal = self.feature >= 0
        idx = np.arange(n)
        if (self.feature >= n_features).any() or (self.feature < -1).any():
            return f"a split feature lies outside [0, {n_features})"
        for child in (self.left, self.right):
            if (internal & ((child <= idx) | (child >= n))).any() or (~internal & (child != -1)).any():
                return "a child index lies outside the tree or before its parent"
        if self.parent[0] != -1 or (self.parent[1:] < 0).any() or (self.parent[1:] >= idx[1:]).any() \
                or (self.parent[self.left[internal]] != idx[internal]).any() \
                or (self.parent[self.right[internal]] != idx[internal]).any():
            return "the parent indices do not match the children"
        if not (np.isfinite(self.value).all() and (self.value >= 0).all()
                and np.allclose(self.value.sum(axis=1), 1.0)):
            return "a node's class distribution is not finite, non-negative and summing to 1"
        if np.isnan(self.trap[internal]).any() or not (
                np.isfinite(self.lo[internal]).all() and np.isfinite(self.hi[internal]).all()):
            return "an internal node has a NaN fuzzy set or a non-finite observed range"

        return None
