"""Flat-array fuzzy tree and its numba firing kernel.

A fitted FERL tree is a set of parallel arrays, one row per node, in creation order (a parent always
precedes its children). Every internal node tests one feature with one fuzzy set given as a
trapezoid ``(a, b, c, d)``: the left child receives the membership ``mu(x_f)`` ("f is S") and the
right child ``1 - mu(x_f)`` ("f is not S"). A learned split "x_f <= theta +- h" (paper eq. 1) is the
trapezoid ``(-inf, -inf, theta - h, theta + h)``; the fixed low / medium / high partitions of the
compact variant are ordinary trapezoids. One membership kernel therefore serves both kinds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numba import njit

__all__ = ["FuzzyTree", "Firing", "trapezoid", "membership", "sparse_firing", "support_gate"]

NO_CHILD = -1
SPLIT_LEARNED = 0
SPLIT_FIXED = 1


@njit(cache=True, inline="always")
def trapezoid(x: float, a: float, b: float, c: float, d: float) -> float:
    """Membership of ``x`` in the trapezoid ``(a, b, c, d)``, a value in [0, 1].

    1 on ``[b, c]``, linear ramps on ``[a, b]`` and ``[c, d]``, 0 outside ``[a, d]``. Infinite
    ``a = b = -inf`` (or ``c = d = +inf``) give a shoulder; a degenerate ramp (``a == b``) is a step.
    Implements paper eq. 1 for ``(-inf, -inf, theta - h, theta + h)``.
    """
    if x < a:
        return 0.0
    if x < b:
        return (x - a) / (b - a)
    if x <= c:
        return 1.0
    if x < d:
        return (d - x) / (d - c)
    return 0.0


@njit(cache=True)
def membership(xs, a, b, c, d):
    """`trapezoid` over an array: ndarray of shape (m,) float64 in [0, 1]."""
    out = np.empty(xs.shape[0])
    for i in range(xs.shape[0]):
        out[i] = trapezoid(xs[i], a, b, c, d)
    return out


@njit(cache=True, inline="always")
def support_gate(x: float, lo: float, hi: float, margin: float) -> float:
    """Bounded-support gate of paper section 3.1 / appendix A.2, a value in [0, 1].

    1 on the observed range ``[lo, hi]`` (edges included), linear decay to 0 over ``margin`` on each
    side, 0 beyond. ``margin`` must be > 0.
    """
    if x < lo:
        g = 1.0 - (lo - x) / margin
    elif x > hi:
        g = 1.0 - (x - hi) / margin
    else:
        return 1.0
    return g if g > 0.0 else 0.0


@njit(cache=True)
def _walk(X, i, feature, trap, left, right, lo, hi, margin, gates, indptr, node, phi, phi0, lost, e):
    """Walk the samples from ``i`` on while a whole sample's entries still fit (at most n_nodes),
    writing from entry ``e`` on; returns the next sample and the next entry.

    Pending nodes are kept sorted by decreasing index and the smallest is taken next, so each
    sample's nodes come out in index order (a child's index exceeds its parent's).
    """
    n = X.shape[0]
    n_nodes = feature.shape[0]
    pending = np.empty(n_nodes + 1, dtype=np.int64)
    pending_phi = np.empty(n_nodes + 1)
    pending_phi0 = np.empty(n_nodes + 1)
    while i < n and node.shape[0] - e >= n_nodes:
        indptr[i] = e
        pending[0] = 0
        pending_phi[0] = 1.0
        pending_phi0[0] = 1.0
        top = 1
        while top > 0:
            top -= 1
            o = pending[top]
            p = pending_phi[top]
            p0 = pending_phi0[top]
            node[e] = o
            phi[e] = p
            phi0[e] = p0
            lost[e] = 0.0
            e += 1
            f = feature[o]
            if f < 0:
                continue
            x = X[i, f]
            if gates and p > 0.0:
                g = support_gate(x, lo[o], hi[o], margin[o])
                lost[e - 1] = p * (1.0 - g)
                p = p * g
            m = trapezoid(x, trap[o, 0], trap[o, 1], trap[o, 2], trap[o, 3])
            for side in range(2):
                if side == 0:
                    child, q, q0 = right[o], p * (1.0 - m), p0 * (1.0 - m)
                else:
                    child, q, q0 = left[o], p * m, p0 * m
                if q0 > 0.0:  # insert, keeping the pending nodes sorted by decreasing index
                    t = top
                    while t > 0 and pending[t - 1] < child:
                        pending[t] = pending[t - 1]
                        pending_phi[t] = pending_phi[t - 1]
                        pending_phi0[t] = pending_phi0[t - 1]
                        t -= 1
                    pending[t] = child
                    pending_phi[t] = q
                    pending_phi0[t] = q0
                    top += 1
        i += 1
    return i, e


@njit(cache=True)
def sparse_firing(X, feature, trap, left, right, lo, hi, margin, gates):
    """Firing of the nodes each sample reaches, one walk per sample (sparse rows).

    The walk follows a child only where its ungated firing is non-zero, so a sample costs
    O(nodes it reaches), not O(nodes): the fuzzy bands are narrow and a sample reaches a few paths
    of the tree. Each sample's nodes come out in index order, the order of the dense kernels
    this replaces, so sums over them are the same floats.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features), float64
    feature : ndarray of shape (n_nodes,), int64
        Split feature of each node, -1 for leaves.
    trap : ndarray of shape (n_nodes, 4), float64
        Trapezoid of the left child's fuzzy set (any value at leaves).
    left, right : ndarray of shape (n_nodes,), int64
        Children, -1 for leaves.
    lo, hi, margin : ndarray of shape (n_nodes,), float64
        Observed training range of the split feature at the node and the gate margin.
    gates : bool
        Apply the bounded-support gates (paper section 3.1).

    Returns
    -------
    indptr : ndarray of shape (n_samples + 1,), int64
        Sample ``i``'s entries are ``indptr[i]:indptr[i + 1]``.
    node : ndarray of shape (n_entries,), int64
        Nodes with non-zero ungated firing, increasing within a sample.
    phi : ndarray of shape (n_entries,), float64 in [0, 1]
        Firing reaching the node (root = 1), after the gates of its ancestors.
    phi0 : ndarray of shape (n_entries,), float64 in (0, 1]
        The same firing with the gates off (equal to ``phi`` when ``gates`` is False).
    lost : ndarray of shape (n_entries,), float64 in [0, 1]
        ``phi_o (1 - gamma_o)``: routing mass lost at each internal node (appendix eq. 8); 0 at leaves.
    """
    n = X.shape[0]
    n_nodes = feature.shape[0]
    cap = 16 * n + n_nodes
    indptr = np.empty(n + 1, dtype=np.int64)
    node = np.empty(cap, dtype=np.int64)
    phi = np.empty(cap)
    phi0 = np.empty(cap)
    lost = np.empty(cap)
    i, e = _walk(X, 0, feature, trap, left, right, lo, hi, margin, gates, indptr, node, phi, phi0,
                 lost, 0)
    while i < n:  # out of room: grow by the entries per sample seen so far, and go on
        cap = e + (n - i) * (e // i + 1) + n_nodes
        node = _grown(node, e, cap)
        phi = _grown(phi, e, cap)
        phi0 = _grown(phi0, e, cap)
        lost = _grown(lost, e, cap)
        i, e = _walk(X, i, feature, trap, left, right, lo, hi, margin, gates, indptr, node, phi,
                     phi0, lost, e)
    indptr[n] = e
    return indptr, node[:e], phi[:e], phi0[:e], lost[:e]


@njit(cache=True)
def _grown(a, used, cap):
    out = np.empty(cap, dtype=a.dtype)
    out[:used] = a[:used]
    return out


@dataclass(frozen=True)
class Firing:
    """Sparse node firings of a batch of samples (see `sparse_firing`): sample ``i`` reaches the
    nodes ``node[indptr[i]:indptr[i + 1]]`` (in index order) with firings ``phi`` (gated),
    ``phi0`` (ungated) and gate losses ``lost`` at the same positions."""

    indptr: np.ndarray
    node: np.ndarray
    phi: np.ndarray
    phi0: np.ndarray
    lost: np.ndarray

    @property
    def n_samples(self) -> int:
        return self.indptr.shape[0] - 1

    @classmethod
    def from_dense(cls, phi: np.ndarray) -> Firing:
        """The entries of a dense firing matrix (n_samples, n_nodes); zeros are left out, ``phi0``
        is ``phi`` and ``lost`` is 0."""
        phi = np.asarray(phi, dtype=np.float64)
        fired = phi > 0.0
        indptr = np.concatenate([[0], np.cumsum(fired.sum(axis=1))]).astype(np.int64)
        values = phi[fired]
        return cls(indptr, np.nonzero(fired)[1].astype(np.int64), values, values,
                   np.zeros_like(values))

    def dense(self, values: np.ndarray, n_nodes: int) -> np.ndarray:
        """``values`` (one of the entry arrays) as a dense (n_samples, n_nodes) matrix, zeros
        elsewhere."""
        out = np.zeros((self.n_samples, n_nodes))
        out[np.repeat(np.arange(self.n_samples), np.diff(self.indptr)), self.node] = values
        return out


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
        Free-feature Gaussians of paper eq. 3 (`ferl.novelty.fit_free_gaussians`): firing-weighted
        mean and variance of every feature absent from the node's root-to-node path, NaN for path
        features. None until fitted.
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

    def margins(self, margin_factor: float, min_margin: np.ndarray) -> np.ndarray:
        """Gate margin per node: ``margin_factor * (hi - lo)``, floored by the feature's ``min_margin``.

        Parameters
        ----------
        margin_factor : float > 0
            Margin as a multiple of the node-local observed range (paper default 1.0).
        min_margin : ndarray of shape (n_features,)
            Lower bound per feature (guards a node whose observed range is a single value).
        """
        feat = np.maximum(self.feature, 0)
        width = np.nan_to_num(self.hi - self.lo, nan=0.0)
        return np.maximum(margin_factor * width, min_margin[feat])

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

    def sparse_firing(self, X: np.ndarray, gates: bool, margin: np.ndarray) -> Firing:
        """Sparse firings of the rows of ``X`` (n, n_features); see `sparse_firing`."""
        lo, hi, trap = self.derived("kernel", (self.lo, self.hi, self.trap), lambda: tuple(
            np.nan_to_num(a, nan=0.0) for a in (self.lo, self.hi, self.trap)))
        return Firing(*sparse_firing(
            np.ascontiguousarray(X, dtype=np.float64), self.feature, trap, self.left, self.right,
            lo, hi, np.ascontiguousarray(margin, dtype=np.float64), gates,
        ))

    def firing(self, X: np.ndarray, gates: bool, margin: np.ndarray):
        """Dense firing ``phi`` (n, n_nodes) and gate losses ``lost`` (n, n_nodes); see
        `sparse_firing`. Memory grows as n x n_nodes: batch large inputs."""
        fired = self.sparse_firing(X, gates, margin)
        return fired.dense(fired.phi, self.n_nodes), fired.dense(fired.lost, self.n_nodes)

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
