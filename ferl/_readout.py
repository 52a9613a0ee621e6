"""The read-out of a batch of inputs: one sparse firing pass, shared by every output asked for.

Rows are processed in chunks of `CHUNK`, so the firings held at any time are bounded whatever the
number of rows; per chunk the sparse firings (`ferl._firing.sparse_firing`) feed the evidence
(`ferl.evidence.combine_sparse`) and the novelty scores (`ferl.novelty.analyse`) that the call
asks for, and the chunks' outputs are concatenated.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from ferl._tree import FuzzyTree
from ferl.evidence import Evidence, combine_sparse
from ferl.novelty import Novelty, analyse

__all__ = ["CHUNK", "Readout", "read_out"]

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


def read_out(tree: FuzzyTree, X: np.ndarray, gates: bool, margin: np.ndarray, sources: np.ndarray,
             rule: str, evidence: bool = True, novelty: bool = True) -> Readout:
    """Evidence and / or novelty of validated inputs from one firing pass per chunk of rows.

    Parameters
    ----------
    tree : FuzzyTree
        A fitted tree (with free-feature Gaussians when ``novelty``).
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

    Returns
    -------
    Readout
    """
    parts_e, parts_n = [], []
    for start in range(0, X.shape[0], CHUNK):
        rows = X[start:start + CHUNK]
        fired = tree.sparse_firing(rows, gates, margin)
        if evidence:
            parts_e.append(combine_sparse(fired, tree.value, sources, rule))
        if novelty:
            parts_n.append(analyse(tree, rows, fired))
    return Readout(_concat(Evidence, parts_e) if evidence else None,
                   _concat(Novelty, parts_n) if novelty else None)
