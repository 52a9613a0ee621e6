"""The kinds of OOD score: the product's three, the ablations', and the one a fitted model flags with.

`FERLClassifier.ood_score` and ``credal_readout`` take the product's kinds, `OOD_KINDS`: ``typical``
(the tails of the leaf Gaussians' score and of the nearest rule prototype's distance,
`ferl.novelty.prototypes`), ``joint`` (``typical`` and the class evidence's ``energy``, each
standardised on held-out in-distribution inputs and summed, `ferl.novelty.joint`; models with
learned weights of evidence after ``calibrate_novelty``) and ``energy`` (the learned weights'
``-log sum_k exp(w_k(x))``). The read-out computes seven more, the ablations of `ABLATION_KINDS`
(the paper's ignorance ``m(Theta)``, residual and firing scores, the parts and predecessors of
``typical``): benchmarks and ablation studies read them through
`ferl.benchmarks.ood_kinds.ablation_score`. Every output of the product (``ood_score``'s default,
the novelty threshold of a head, the novelty discount, ``predict``'s flag, ``explain``, the
reports) uses the kind `default_kind` picks.
"""

from __future__ import annotations

__all__ = ["ABLATION_KINDS", "OOD_KINDS", "SCORE_KINDS", "check_kind", "default_kind"]

#: Kinds of ``FERLClassifier.ood_score``, the default first.
OOD_KINDS = ("typical", "joint", "energy")
#: Kinds the read-out computes for ablation studies only (`ferl.benchmarks.ood_kinds.ablation_score`).
ABLATION_KINDS = ("ignorance", "leaf", "nll", "combined", "residual", "firing", "prototype")
#: Every kind the read-out computes (`ferl.readout.batch.read_out`).
SCORE_KINDS = OOD_KINDS + ABLATION_KINDS


def default_kind(model) -> str:
    """The kind of OOD score the product uses for a fitted model.

    Parameters
    ----------
    model : FERLClassifier
        A fitted model.

    Returns
    -------
    str
        ``"typical"`` for the tree's evidence; with learned weights of evidence ``"joint"`` once
        ``calibrate_novelty`` has given held-out reference inputs (``novelty_reference_``), else
        ``"energy"``. How chosen: on the open worlds (held-out classes, 3 seeds x 5 folds) the
        class evidence's energy ranked CUB-50's held-out classes above every baseline while
        ``typical`` trailed, and ``typical`` led on the synthetic world while the energy trailed
        Isolation Forest; their standardised sum was ahead of every baseline on both
        (docs/results/novelty.md, "The product's score").
    """
    if getattr(model, "evidence_weights_", None) is None:
        return "typical"
    return "joint" if getattr(model, "novelty_reference_", None) is not None else "energy"


def check_kind(kind, what: str = "OOD score kind") -> str:
    """``kind`` when it is one of `OOD_KINDS`, else ValueError.

    Parameters
    ----------
    kind : object
        The kind asked for.
    what : str, default="OOD score kind"
        What the kind is, for the message.

    Returns
    -------
    str
        ``kind``.

    Raises
    ------
    ValueError
        ``kind`` is not one of `OOD_KINDS`; for an ablation kind the message names
        `ferl.benchmarks.ood_kinds.ablation_score`, which still computes it.
    """
    if isinstance(kind, str) and kind in OOD_KINDS:
        return kind
    if isinstance(kind, str) and kind in ABLATION_KINDS:
        raise ValueError(f"{what} {kind!r} is an ablation, not one of the product's kinds {list(OOD_KINDS)}; "
                         f"ablation studies read it with ferl.benchmarks.ood_kinds.ablation_score(model, X, "
                         f"{kind!r})")
    raise ValueError(f"unknown {what} {kind!r}; expected one of {list(OOD_KINDS)}")
