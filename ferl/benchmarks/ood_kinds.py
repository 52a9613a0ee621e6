"""The ablation kinds of OOD score: what the read-out computes beyond the product's three kinds.

`FERLClassifier.ood_score` offers the product's kinds (`ferl.novelty.ood_score.OOD_KINDS`: ``typical``,
``energy``, ``ignorance``). The kinds of `ABLATION_KINDS` are kept for benchmarks and ablation
studies (`ferl.benchmarks.ood`, the open-world protocol's appendix, ``scripts/bench_*.py``):

* ``leaf``: the leaf Gaussians' negative log-likelihood per feature plus ``-log(eps + firing)``, one
  of the two tails of ``typical``;
* ``prototype``: the L1 distance to the nearest rule prototype, in training ranges, its other tail;
* ``nll`` and ``combined``: other weightings of the same terms (``leaf`` with half the paper's
  residual; half the residual plus the firing term);
* ``residual``: the paper's free-feature Mahalanobis average (eq. 3, its "native residual");
* ``firing``: ``1 -`` the total leaf firing, the routing mass lost to the gates (eq. 8).

Formulas: `ferl.novelty.scores.Novelty.score`. `ablation_score` reads them with the same read-out
as ``ood_score`` (`ferl.readout.mixin.read_score`), so they are the floats the read-out's own scores
are made of.
"""

from __future__ import annotations

import numpy as np

from ferl.novelty.ood_score import ABLATION_KINDS
from ferl.readout.mixin import read_score

__all__ = ["ABLATION_KINDS", "ablation_score"]


def ablation_score(model, X, kind: str) -> np.ndarray:
    """OOD score of an ablation kind.

    Parameters
    ----------
    model : FERLClassifier
        A fitted model.
    X : array-like of shape (n_samples, n_features_in_)
    kind : {"leaf", "nll", "combined", "residual", "firing", "prototype"}
        One of `ABLATION_KINDS` (module docstring).

    Returns
    -------
    ndarray of shape (n_samples,), float64, finite
        Higher means more novel.

    Raises
    ------
    ValueError
        ``kind`` not one of `ABLATION_KINDS` (the product's kinds are read with ``model.ood_score``),
        or bad ``X``.
    """
    if not isinstance(kind, str) or kind not in ABLATION_KINDS:
        raise ValueError(f"unknown ablation kind of OOD score {kind!r}; expected one of "
                         f"{list(ABLATION_KINDS)} (the product's kinds: model.ood_score)")
    return read_score(model, X, kind)
