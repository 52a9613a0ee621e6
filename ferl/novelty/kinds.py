"""The kinds of OOD score: the product's three, the ablations', and the one a fitted model flags with.

`FERLClassifier.ood_score` and ``credal_readout`` take the product's kinds, `OOD_KINDS`: ``typical``
(their default: the tails of the leaf Gaussians' score and of the nearest rule prototype's
distance, `ferl.novelty.prototypes`), ``energy`` (the learned weights of evidence's
``-log sum_k exp(w_k(x))``, models fitted with ``evidence_weights="learned"`` only) and
``ignorance`` (``m(Theta)`` of the evidence). The read-out computes six more, the ablations of
`ABLATION_KINDS` (the parts and predecessors of ``typical``, the paper's residual and firing
scores): benchmarks and ablation studies read them through
`ferl.benchmarks.ood_kinds.ablation_score`. Every output of the product (the novelty threshold of
a head, ``predict``'s flag, ``explain``, the reports) uses the kind `default_kind` picks.
"""

from __future__ import annotations

__all__ = ["ABLATION_KINDS", "OOD_KINDS", "SCORE_KINDS", "check_kind", "default_kind"]

#: Kinds of ``FERLClassifier.ood_score``, the default first.
OOD_KINDS = ("typical", "energy", "ignorance")
#: Kinds the read-out computes for ablation studies only (`ferl.benchmarks.ood_kinds.ablation_score`).
ABLATION_KINDS = ("leaf", "nll", "combined", "residual", "firing", "prototype")
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
        ``"energy"`` for a model with learned weights of evidence (``evidence_weights_`` not None):
        the score that ranked held-out classes best on real concept vectors
        (docs/results/real-heads.md); ``"typical"`` otherwise, ``ood_score``'s default.
    """
    return "energy" if getattr(model, "evidence_weights_", None) is not None else "typical"


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
