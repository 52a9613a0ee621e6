"""Sparse firing of a fuzzy tree: the nodes each sample reaches, with their firings (numba).

A sample reaches few nodes of a fitted tree (the fuzzy bands are narrow), so the read-out routes
the samples node by node, keeping only the samples that reach each node, instead of filling a
dense samples x nodes matrix; the result, a `Firing`, feeds the evidence
(`ferl.evidence.combine_sparse`) and the novelty scores (`ferl.novelty.scores.analyse`) of the same call.

Node-by-node routing beat a per-sample walk that emits each sample's nodes in index order on the
KEEL read-out (``scripts/bench_scale.py --sections keel``; figures in docs/results/speed.md): the
walk keeps its pending nodes sorted and pays for it where samples reach many nodes, and it was
faster only on batches of a few tens of rows.

The fit reads the training firing once, with the gates off (`training_firing`): a per-sample walk
counts each node's samples first, then fills buffers of exactly that size with int32 rows and one
firing per entry (12 bytes an entry instead of 32 in a buffer grown by doubling).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numba import njit

from ferl.tree.membership import support_gate, trapezoid

__all__ = ["Firing", "Scratch", "is_ramp", "sparse_firing", "training_firing"]


@njit(cache=True, inline="always")
def is_ramp(a, b, c, d):
    """Whether the trapezoid ``(a, b, c, d)`` is a learned split's right shoulder with a finite,
    non-zero band: ``a = b = -inf`` and ``0 < d - c < inf`` (`_membership`'s branch-free path)."""
    return a == -np.inf and b == -np.inf and c < d and d - c < np.inf


@njit(cache=True, inline="always")
def _membership(x, a, b, c, d, ramp):
    """`trapezoid`, with a branch-free path for a learned split's right shoulder ``ramp``
    (`is_ramp`): ``clip((d - x) / (d - c), 0, 1)`` is the same float for every finite ``x`` (``+ 0.0``
    turns the -0.0 of an underflowing ``(d - x) / (d - c)`` into the trapezoid's 0.0).

    The branchy trapezoid mispredicts on inputs inside the band; this path routes large batches
    markedly faster (docs/results/speed.md).
    """
    if ramp:
        return max(min((d - x) / (d - c), 1.0), 0.0) + 0.0
    return trapezoid(x, a, b, c, d)


@njit(cache=True)
def _split_entries(xt_f, a, b, c, d, ramp, lo_o, hi_o, margin_o, gates, s, k, e, rows, phi, phi0,
                   lost, mu, through):
    """Route the ``k`` entries of one node (from ``s``) to its children, written from ``e`` on:
    the left child's entries, one spare slot, the right child's. Returns both counts."""
    n_left = 0
    for q in range(s, s + k):
        x = xt_f[rows[q]]
        m = _membership(x, a, b, c, d, ramp)
        mu[q - s] = m
        n_left += phi0[q] * m > 0.0
        p = phi[q]
        if gates:
            g = support_gate(x, lo_o, hi_o, margin_o)
            lost[q] = p * (1.0 - g)
            p = p * g
        through[q - s] = p
    left = e
    right = e + n_left + 1
    for q in range(s, s + k):
        # branch-free compaction: write every entry, advance only past the kept ones
        p = through[q - s]
        p0 = phi0[q]
        m = mu[q - s]
        row = rows[q]
        rows[left] = row
        phi[left] = p * m
        phi0[left] = p0 * m
        lost[left] = 0.0
        left += p0 * m > 0.0
        rows[right] = row
        phi[right] = p * (1.0 - m)
        phi0[right] = p0 * (1.0 - m)
        lost[right] = 0.0
        right += p0 * (1.0 - m) > 0.0
    return n_left, right - (e + n_left + 1)


@njit(cache=True)
def _route(xt, feature, trap, left, right, lo, hi, margin, gates, start, count, rows, phi, phi0, lost, e):
    """Route every node, in index order, from the entries ``0:e`` (the root's); where a node's
    children's entries do not fit, the four buffers are grown first (by the entries per node seen
    so far). Returns the buffers (the given ones or their replacements) and the entries used.
    ``xt`` is the inputs, feature-major."""
    n_nodes = feature.shape[0]
    mu = np.empty(xt.shape[1])
    through = np.empty(xt.shape[1])
    for o in range(n_nodes):
        k = count[o]
        f = feature[o]
        if f >= 0 and k > 0:
            if rows.shape[0] - e < 2 * k + 2:  # out of room
                cap = 2 * e + 2 * k + 2 * n_nodes
                rows = _grown(rows, e, cap)
                phi = _grown(phi, e, cap)
                phi0 = _grown(phi0, e, cap)
                lost = _grown(lost, e, cap)
            a, b, c, d = trap[o, 0], trap[o, 1], trap[o, 2], trap[o, 3]
            ramp = is_ramp(a, b, c, d)
            n_left, n_right = _split_entries(xt[f], a, b, c, d, ramp, lo[o], hi[o], margin[o], gates,
                                             start[o], k, e, rows, phi, phi0, lost, mu,
                                             through)
            start[left[o]] = e
            count[left[o]] = n_left
            start[right[o]] = e + n_left + 1
            count[right[o]] = n_right
            e += n_left + n_right + 1
    return rows, phi, phi0, lost, e


@njit(cache=True)
def sparse_firing(X, feature, trap, left, right, lo, hi, margin, gates, rows, phi, phi0, lost):
    """Firing of the nodes each sample reaches, node by node (sparse columns).

    Nodes are visited in index order (a parent before its children); each node routes the samples
    that reach it to its children, keeping a child's entry only where its ungated firing is
    non-zero. A sample therefore costs O(nodes it reaches), not O(nodes): the fuzzy bands are
    narrow and a sample reaches a few paths of the tree. The work on one node is a branch-free
    loop over independent samples.

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
    rows, phi, phi0, lost : ndarray of shape (m,), int64 / float64 x 3
        Entry buffers to fill (`Scratch`): used when they hold at least ``n + 2`` entries, grown
        (copied into larger ones) when the entries outgrow them, replaced when smaller.

    Returns
    -------
    start, count : ndarray of shape (n_nodes,), int64
        Node ``o``'s entries are ``start[o]:start[o] + count[o]`` (count 0: no sample reaches it).
    rows : ndarray of shape (>= n_entries,), int64
        Sample of each entry; increasing within a node.
    phi : ndarray of shape (>= n_entries,), float64 in [0, 1]
        Firing reaching the node (root = 1), after the gates of its ancestors.
    phi0 : ndarray of shape (>= n_entries,), float64 in (0, 1]
        The same firing with the gates off (equal to ``phi`` when ``gates`` is False).
    lost : ndarray of shape (>= n_entries,), float64 in [0, 1]
        ``phi_o (1 - gamma_o)``: routing mass lost at each internal node (appendix eq. 8); 0 at leaves.
    n_entries : int
        The entries used: the four buffers (the given ones or their replacements) hold them first.
    """
    n = X.shape[0]
    n_nodes = feature.shape[0]
    start = np.zeros(n_nodes, dtype=np.int64)
    count = np.zeros(n_nodes, dtype=np.int64)
    if rows.shape[0] < n + 2:
        cap = 24 * n + 2 * n_nodes + 8
        rows = np.empty(cap, dtype=rows.dtype)
        phi = np.empty(cap)
        phi0 = np.empty(cap)
        lost = np.empty(cap)
    for i in range(n):
        rows[i] = i
        phi[i] = 1.0
        phi0[i] = 1.0
        lost[i] = 0.0
    count[0] = n
    xt = np.ascontiguousarray(X.T)  # a node reads one feature of its samples
    rows, phi, phi0, lost, e = _route(xt, feature, trap, left, right, lo, hi, margin, gates, start, count,
                                      rows, phi, phi0, lost, n)
    return start, count, rows, phi, phi0, lost, e


@njit(cache=True)
def _grown(a, used, cap):
    out = np.empty(cap, dtype=a.dtype)
    out[:used] = a[:used]
    return out


@njit(cache=True)
def _walk(X, feature, trap, left, right, start, rows, phi0):
    """Depth-first walk of every sample through the nodes it reaches (ungated firing > 0). With
    ``start`` None, returns the count of samples per node; else writes the entries of node ``o``
    from ``start[o]`` on, samples in increasing order, and returns the end of each node's entries."""
    n_nodes = feature.shape[0]
    fill = np.zeros(n_nodes, dtype=np.int64) if start is None else start.copy()
    stack = np.empty(n_nodes + 1, dtype=np.int64)
    firing = np.empty(n_nodes + 1)
    for i in range(X.shape[0]):
        stack[0] = 0
        firing[0] = 1.0
        top = 1
        while top > 0:
            top -= 1
            o = stack[top]
            p0 = firing[top]
            if start is not None:
                rows[fill[o]] = i
                phi0[fill[o]] = p0
            fill[o] += 1
            f = feature[o]
            if f < 0:
                continue
            a, b, c, d = trap[o, 0], trap[o, 1], trap[o, 2], trap[o, 3]
            m = _membership(X[i, f], a, b, c, d, is_ramp(a, b, c, d))
            # right pushed first: the left subtree is walked first (any order gives the same entries)
            if p0 * (1.0 - m) > 0.0:
                stack[top] = right[o]
                firing[top] = p0 * (1.0 - m)
                top += 1
            if p0 * m > 0.0:
                stack[top] = left[o]
                firing[top] = p0 * m
                top += 1
    return fill


def training_firing(X, feature, trap, left, right) -> Firing:
    """Ungated firing of the training rows, in buffers of exactly the entries' size (fit time).

    The same entries, node by node and in the same order, as `sparse_firing` with the gates off
    (node ``o``'s firing ``phi0`` is the product of the memberships on its path, bit for bit), with
    no gap between nodes, rows as int32 (int64 from 2^31 rows on) and ``phi`` the same array as
    ``phi0``. On the training rows of positive weight the gates are 1 (a row reaching a node with
    positive firing lies in the node's observed range), so the gated firing is this one wherever
    a sample weight makes it count.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features), float64, C-contiguous
    feature, trap, left, right : the tree's arrays, as in `sparse_firing` (``trap`` without NaN).

    Returns
    -------
    Firing
        ``lost`` is a read-only view of zeros (no gate loses any mass with the gates off).
    """
    count = _walk(X, feature, trap, left, right, None, np.empty(0, dtype=np.int32), np.empty(0))
    start = np.zeros_like(count)
    np.cumsum(count[:-1], out=start[1:])
    size = int(count.sum())
    rows = np.empty(size, dtype=np.int32 if X.shape[0] < 2**31 else np.int64)
    phi0 = np.empty(size)
    _walk(X, feature, trap, left, right, start, rows, phi0)
    return Firing(start, count, rows, phi0, phi0, np.broadcast_to(np.float64(0.0), (size,)),
                  X.shape[0])


def _empty(dtype=np.float64) -> np.ndarray:
    return np.empty(0, dtype=dtype)


@dataclass
class Scratch:
    """Entry buffers that successive `sparse_firing` calls fill and grow (a read-out's chunks, and
    a thread's successive read-outs: `ferl.readout.batch.thread_scratch`).

    A chunk's `Firing` is a view into them, valid until the next call with the same scratch. Fresh
    buffers per chunk cost their page faults, and most chunks outgrew the first guess (24 entries a
    row) and were copied; reusing them saves both (docs/results/speed.md).
    """

    rows: np.ndarray = field(default_factory=lambda: _empty(np.int64))
    phi: np.ndarray = field(default_factory=_empty)
    phi0: np.ndarray = field(default_factory=_empty)
    lost: np.ndarray = field(default_factory=_empty)


@dataclass(frozen=True)
class Firing:
    """Sparse node firings of a batch of samples (see `sparse_firing`): node ``o`` is reached by
    the samples ``rows[start[o]:start[o] + count[o]]``, with firings ``phi`` (gated), ``phi0``
    (ungated) and gate losses ``lost`` at the same positions."""

    start: np.ndarray
    count: np.ndarray
    rows: np.ndarray
    phi: np.ndarray
    phi0: np.ndarray
    lost: np.ndarray
    n_samples: int

    @classmethod
    def from_dense(cls, phi: np.ndarray) -> Firing:
        """The entries of a dense firing matrix (n_samples, n_nodes); zeros are left out, ``phi0``
        is ``phi`` and ``lost`` is 0."""
        phi = np.asarray(phi, dtype=np.float64)
        fired = phi.T > 0.0
        count = fired.sum(axis=1)
        start = np.concatenate([[0], np.cumsum(count)[:-1]]).astype(np.int64)
        rows = np.nonzero(fired)[1].astype(np.int64)
        values = phi.T[fired]
        return cls(start, count.astype(np.int64), rows, values, values, np.zeros_like(values),
                   phi.shape[0])

    def entries(self) -> tuple[np.ndarray, np.ndarray]:
        """Positions of the entries in use, node by node (the gaps between nodes skipped), and the
        node of each: two int64 arrays of the same length."""
        node = np.repeat(np.arange(self.start.shape[0]), self.count)
        first = np.repeat(self.start - (np.cumsum(self.count) - self.count), self.count)
        return first + np.arange(node.size), node

    def dense(self, values: np.ndarray, nodes: np.ndarray | None = None) -> np.ndarray:
        """``values`` (one of the entry arrays) as a dense (n_samples, n_nodes) matrix, zeros elsewhere;
        with ``nodes`` (bool mask of shape (n_nodes,)) only those columns, (n_samples, nodes.sum()),
        without building the others. ValueError: ``nodes`` not such a mask."""
        if nodes is not None and not (isinstance(nodes, np.ndarray) and nodes.dtype == np.bool_
                                      and nodes.shape == self.start.shape):
            raise ValueError(f"nodes must be a bool mask of shape ({self.start.shape[0]},), got "
                             f"{type(nodes).__name__} {getattr(nodes, 'dtype', '')} {np.shape(nodes)}")
        at, node = self.entries()
        if nodes is None:
            out = np.zeros((self.n_samples, self.start.shape[0]))
            out[self.rows[at], node] = values[at]
            return out
        column = np.cumsum(nodes) - 1
        keep = nodes[node]
        out = np.zeros((self.n_samples, int(nodes.sum())))
        out[self.rows[at[keep]], column[node[keep]]] = values[at[keep]]
        return out
