"""Reliability of the evidence sources for the novelty discount (`ferl.evidence.discount`).

`ferl.novelty.typicality` fits the leaf Gaussians and the reliability's ``(tau, lambda)``; here they turn
leaf typicality scores into reliabilities ``r_l(x)`` and those into every node's.

With a reliability of 1 below ``tau`` the ignorance of every input under ``tau`` would be the
paper's, blind to novelty, and the discounted ignorance would rank held-out classes far below the
``nll`` score. A gentle slope ``delta`` below ``tau`` (beyond the paper) keeps typical inputs'
masses within ``delta`` of the paper's (``r >= 1 - delta``) and lets the ignorance rank them by
typicality. ``delta`` = `TYPICAL_DISCOUNT` = 0.01 gets most of the ranking gain of the steepest
slope tried while typical masses move by at most ``delta``; steeper slopes rank better but abstain
on more retained inputs. Chosen on the synthetic open world
(``scripts/bench_openworld_novelty.py``) and checked on 30 KEEL sets x 5 folds
(``scripts/bench_novelty_tabular.py``); figures in docs/results/novelty.md ("The per-source
discount").
"""

from __future__ import annotations

import numpy as np

from ferl.novelty.discount import reliability_curve
from ferl.novelty.leaf_paths import path_residual
from ferl.novelty.leaf_readout import leaf_totals
from ferl.novelty.scores import free_gaussians
from ferl.novelty.typicality import Z_MAX, LeafGaussians
from ferl.tree.firing import Firing
from ferl.tree.fuzzy_tree import FuzzyTree

__all__ = ["TYPICAL_DISCOUNT", "leaf_typicality", "reliability", "source_reliability"]

#: The most a typical input (typicality score at most ``tau``) is discounted: ``r >= 1 - delta``.
TYPICAL_DISCOUNT = 0.01


def reliability(model: LeafGaussians, score: np.ndarray) -> np.ndarray:
    """``r_l(x) = exp(-delta min(s_l, tau) / tau - max(0, s_l - tau) / lambda)`` of leaf typicality
    scores ``s_l >= 0`` (module docstring; `leaf_typicality`), same shape as ``score``,
    in [0, 1] (0 only where the exponential underflows, far off the training data), ``>= 1 - delta``
    up to ``tau``, strictly decreasing in ``s_l`` (constant 1 up to ``tau`` when ``tau = 0``)."""
    tau, width = model.reliability
    return reliability_curve(score, float(tau), float(width), TYPICAL_DISCOUNT)


def source_reliability(tree: FuzzyTree, model: LeafGaussians, phi0: np.ndarray,
                       score: np.ndarray) -> np.ndarray:
    """Reliability of every node as an evidence source, shape (n, n_nodes), in [0, 1].

    A leaf's is `reliability` of its own typicality score; an internal node's is the ``phi0``-weighted mean
    of the reliabilities of the leaves below it (its firing with the gates off is the sum of
    theirs), i.e. how typical the input is of the region the node covers, at the leaves'
    resolution; 1 where none of them fires.

    Parameters
    ----------
    tree : FuzzyTree
    model : LeafGaussians
    phi0 : ndarray of shape (n, n_nodes)
        Ungated firing of every node.
    score : ndarray of shape (n, L)
        Leaf typicality scores (`leaf_typicality`).
    """
    n = phi0.shape[0]
    num = np.zeros((n, tree.n_nodes))
    den = np.zeros((n, tree.n_nodes))
    num[:, model.leaves] = phi0[:, model.leaves] * reliability(model, score)
    den[:, model.leaves] = phi0[:, model.leaves]
    for o in range(tree.n_nodes - 1, 0, -1):  # children after parents: accumulate bottom-up
        num[:, tree.parent[o]] += num[:, o]
        den[:, tree.parent[o]] += den[:, o]
    out = np.ones((n, tree.n_nodes))
    np.divide(num, den, out=out, where=den > 0)
    return np.clip(out, 0.0, 1.0)


def leaf_typicality(tree: FuzzyTree, leaves: LeafGaussians, X: np.ndarray, firing: Firing,
                    leaf_nll: np.ndarray | None = None) -> np.ndarray:
    """Typicality ``s_l(x) = nll_l(x) / d + R_l(x) / 2`` of every leaf an input reaches (beyond the
    paper; drives the evidence discount, `ferl.novelty.typicality`): the leaf Gaussian's NLL and the paper's
    residual along the leaf's path (`ferl.novelty.leaf_paths`), i.e. the leaf's part of the ``"nll"`` score
    (the reliability's quantiles and ``delta`` were measured with it).

    Parameters
    ----------
    tree, leaves : a fitted tree with free-feature Gaussians, and its leaf Gaussians
    X : ndarray of shape (n_samples, n_features), float64, finite
    firing : ferl.tree.firing.Firing
        The sparse firings of ``X`` (the ungated ``phi0`` is read).
    leaf_nll : ndarray of shape (n_samples, n_leaves) or None
        ``nll_l(x)`` when already computed (`Novelty.leaf_nll`).

    Returns
    -------
    ndarray of shape (n_samples, n_leaves), float64 >= 0
        ``s_l(x)`` where ``phi0_l(x) > 0``, else 0.
    """
    X = np.ascontiguousarray(X, dtype=np.float64)
    leaf_nll = leaf_totals(leaves, X, firing, want_nll=True)[1] if leaf_nll is None else leaf_nll
    residual = path_residual(X, firing.start, firing.count, firing.rows, firing.phi0, leaves.leaves,
                             tree.parent, *free_gaussians(tree), Z_MAX)
    return leaf_nll / X.shape[1] + residual / 2
