"""Pruning after growth: minimal cost-complexity (weakest-link) pruning of a fuzzy tree.

Algorithm 1 of the paper leaves pruning optional; the compact preset uses it (`ferl.presets`).
The cost of a tree is its soft training error plus ``alpha`` per rule (Breiman et al., CART,
chapter 3), with the soft error of a node ``o`` the training weight it misclassifies,
``w_o (1 - max_c p_o(c))``, as a fraction of the root's weight. A complementary fuzzy split hands
each sample's firing to its two children in full (``mu + (1 - mu) = 1``), so the soft errors of
the leaves of a subtree never exceed that of its root, and undoing a split is well defined: the
collapsed node keeps its own class distribution, which is already the firing-weighted mixture of
its descendants'.
"""

from __future__ import annotations

import numpy as np

from ferl.tree.fuzzy_tree import FuzzyTree

__all__ = ["cost_complexity_prune"]

#: Relative tolerance under which a collapse is free: rounding must not decide a zero-cost undo.
_TOL = 1e-12


def _collapsed(tree: FuzzyTree, alpha: float) -> np.ndarray:
    """Leaf mask after weakest-link pruning at ``alpha`` (internal nodes that become leaves)."""
    n = tree.n_nodes
    leaf = tree.feature < 0
    error = tree.weight * (1.0 - tree.value.max(axis=1)) / tree.weight[0]
    while True:
        subtree_error, n_leaves = error.copy(), np.ones(n)
        for o in range(n - 1, -1, -1):  # children after parents
            if not leaf[o]:
                lc, rc = tree.left[o], tree.right[o]
                subtree_error[o] = subtree_error[lc] + subtree_error[rc]
                n_leaves[o] = n_leaves[lc] + n_leaves[rc]
        reached = np.zeros(n, dtype=bool)
        reached[0] = True
        for o in range(n):
            if reached[o] and not leaf[o]:
                reached[tree.left[o]] = reached[tree.right[o]] = True
        internal = np.flatnonzero(reached & ~leaf)
        if internal.size == 0:
            return leaf
        # error added per rule saved by collapsing each subtree; the weakest link goes first
        cost = (error[internal] - subtree_error[internal]) / (n_leaves[internal] - 1.0)
        weakest = int(np.argmin(cost))
        if cost[weakest] > alpha + _TOL:
            return leaf
        leaf[internal[weakest]] = True


def cost_complexity_prune(tree: FuzzyTree, alpha: float) -> FuzzyTree:
    """Undo, weakest link first, every split whose subtree saves less than ``alpha`` error per rule.

    At ``alpha = 0`` only the splits that change no training point prediction are undone (a
    subtree whose leaves all predict its root's class), so sibling leaves always disagree; a
    larger ``alpha`` trades training accuracy for fewer rules.

    Parameters
    ----------
    tree : FuzzyTree
        A finalised tree (node 0 the root, parents before children).
    alpha : float >= 0
        Complexity cost of one rule, in fractions of the training weight.

    Returns
    -------
    FuzzyTree
        ``tree`` itself when nothing is pruned, else a new tree of the kept nodes (in their order)
        whose collapsed internal nodes are leaves.
    """
    leaf = _collapsed(tree, alpha)
    keep = np.zeros(tree.n_nodes, dtype=bool)
    keep[0] = True
    for o in range(tree.n_nodes):
        if keep[o] and not leaf[o]:
            keep[tree.left[o]] = keep[tree.right[o]] = True
    if keep.all():
        return tree
    new_index = np.cumsum(keep) - 1
    out = FuzzyTree(n_classes=tree.n_classes)
    for name in FuzzyTree.ARRAY_FIELDS:
        setattr(out, name, getattr(tree, name)[keep].copy())
    cut = leaf[keep] & (out.feature >= 0)  # collapsed internal nodes become leaves
    out.feature[cut] = out.kind[cut] = out.fuzzy_set[cut] = -1
    for name in ("trap", "threshold", "half_width", "lo", "hi", "gain"):
        getattr(out, name)[cut] = np.nan
    internal = out.feature >= 0
    out.left = np.where(internal, new_index[np.maximum(out.left, 0)], -1)
    out.right = np.where(internal, new_index[np.maximum(out.right, 0)], -1)
    out.parent = np.where(out.parent >= 0, new_index[np.maximum(out.parent, 0)], -1)
    return out
