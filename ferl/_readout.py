"""The read-out of a batch of inputs: one sparse firing pass, shared by every output asked for.

Rows are processed in chunks of `CHUNK`, so the firings held at any time are bounded whatever the
number of rows; per chunk the sparse firings (`ferl._firing.sparse_firing`) feed the evidence
(`ferl.evidence.combine_sparse`) and the novelty scores (`ferl.novelty.analyse`) that the call
asks for, and the chunks' outputs are concatenated. With the novelty discount the evidence
combines the firings discounted by each source's reliability (`ferl.evidence.discount`,
`ferl.typicality.source_reliability`), from the leaf typicality scores of the same pass
(`ferl.novelty.leaf_typicality`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import numpy as np

from ferl._firing import Firing
from ferl._tree import FuzzyTree
from ferl.evidence import Evidence, combine_sparse, discount
from ferl.novelty import Novelty, analyse, leaf_typicality
from ferl.typicality import LeafGaussians, source_reliability

__all__ = ["CHUNK", "Readout", "discounted", "read_out"]

#: Rows per firing pass: the sparse firings of a chunk take about 32 bytes per node a row
#: reaches (a few tens of nodes), i.e. a few MB.
CHUNK = 8192


@dataclass(frozen=True)
class Readout:
    """Outputs of one read-out; None for an output the call did not ask for."""

    evidence: Evidence | None
    novelty: Novelty | None


def _concat(cls, parts):
    if len(parts) == 1:
        return parts[0]
    return cls(*(np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(cls)))


def discounted(tree: FuzzyTree, leaves: LeafGaussians, X: np.ndarray, fired: Firing,
               leaf_nll: np.ndarray | None = None) -> tuple[Firing, np.ndarray]:
    """The firings ``fired`` of ``X`` discounted by their sources' reliabilities.

    Parameters
    ----------
    tree, leaves : the fitted tree and its leaf Gaussians
    X : ndarray of shape (n_samples, n_features), float64, finite
    fired : Firing
        The sparse firings of ``X``.
    leaf_nll : ndarray of shape (n_samples, n_leaves) or None
        The leaf NLLs of ``X`` (`ferl.novelty.Novelty.leaf_nll`) when already computed.

    Returns
    -------
    Firing
        ``fired`` with ``phi`` replaced by ``r_o(x) phi_o(x)``.
    ndarray of shape (n_samples, n_nodes), float64 in [0, 1]
        The reliabilities ``r_o(x)`` (`ferl.typicality.source_reliability`).
    """
    phi0 = fired.dense(fired.phi0)
    score = leaf_typicality(tree, leaves, X, fired, leaf_nll)
    reliability = source_reliability(tree, leaves, phi0, score)
    at, node = fired.entries()
    entry = np.ones_like(fired.phi)
    entry[at] = reliability[fired.rows[at], node]
    return replace(fired, phi=discount(fired.phi, entry)), reliability


def read_out(tree: FuzzyTree, leaves: LeafGaussians, X: np.ndarray, gates: bool, margin: np.ndarray,
             sources: np.ndarray, rule: str, evidence: bool = True, novelty: bool = True,
             novelty_discount: bool = False) -> Readout:
    """Evidence and / or novelty of validated inputs from one firing pass per chunk of rows.

    Parameters
    ----------
    tree : FuzzyTree
        A fitted tree (with free-feature Gaussians when ``novelty``).
    leaves : LeafGaussians
        Its leaf Gaussians (`ferl.typicality`).
    X : ndarray of shape (n_samples, n_features), float64, finite
    gates : bool
        Apply the bounded-support gates.
    margin : ndarray of shape (n_nodes,)
        Gate margins (`FuzzyTree.margins`).
    sources : ndarray of shape (n_nodes,), bool
        Evidence sources.
    rule : {"dempster", "cautious"}
        Combination rule.
    evidence, novelty : bool
        Outputs to compute.
    novelty_discount : bool
        Discount the evidence sources by their reliabilities (`discounted`); False leaves the
        paper's evidence bit for bit.

    Returns
    -------
    Readout
    """
    parts_e, parts_n = [], []
    for start in range(0, X.shape[0], CHUNK):
        rows = X[start:start + CHUNK]
        fired = tree.sparse_firing(rows, gates, margin)
        if novelty:
            parts_n.append(analyse(tree, leaves, rows, fired))
        if evidence:
            if novelty_discount:
                fired = discounted(tree, leaves, rows, fired, parts_n[-1].leaf_nll if novelty else None)[0]
            parts_e.append(combine_sparse(fired, tree.value, sources, rule))
    return Readout(_concat(Evidence, parts_e) if evidence else None,
                   _concat(Novelty, parts_n) if novelty else None)
