"""The read-out of a batch of inputs: one sparse firing pass, shared by every output asked for.

Rows are processed in chunks of `CHUNK`, so the firings held at any time are bounded whatever the
number of rows (in one `ferl.tree.firing.Scratch` of entry buffers that the chunks, and the thread's
later read-outs, reuse: `thread_scratch`). Per chunk the sparse firings
(`ferl.tree.firing.sparse_firing`) feed the evidence (`ferl.evidence.combine_sparse`), the per-feature
novelty (`ferl.novelty.scores.analyse`) and the OOD score alone (`ferl.novelty.ood_score.score_totals`, no
per-feature split) that the call asks for, and the chunks' outputs are concatenated. With the
``"typical"`` novelty discount the combined evidence is discounted by the reliability of the
input's ``"typical"`` score (`ferl.novelty.discount`); with the ``"rules"`` one the evidence
combines the firings discounted by each source's reliability (`ferl.evidence.discount`,
`ferl.novelty.discount.source_reliability`), from the leaf typicality scores of the same pass.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, fields, replace

import numpy as np

from ferl.evidence.algebra import Evidence, combine_sparse, discount, discount_evidence
from ferl.evidence.weights import EvidenceWeights, evidence_energy, evidence_from_weights, rule_sources
from ferl.novelty.discount import leaf_typicality, point_reliability, source_reliability, typical_reliability
from ferl.novelty.leaf_gaussians import LeafGaussians
from ferl.novelty.ood_score import SCORE_KINDS, TOTAL_KINDS, joint_score, score_totals
from ferl.novelty.prototypes import RulePrototypes, prototype_kind
from ferl.novelty.scores import Novelty, analyse
from ferl.tree.firing import Firing, Scratch
from ferl.tree.fuzzy_tree import FuzzyTree

__all__ = ["CHUNK", "CredalReadout", "Readout", "discounted", "read_out", "thread_scratch"]

#: Rows per firing pass: the sparse firings of a chunk take about 32 bytes per node a row
#: reaches (a few tens of nodes), i.e. a few MB.
CHUNK = 8192

_THREAD = threading.local()


def thread_scratch() -> Scratch:
    """The calling thread's entry buffers, kept from one read-out to the next.

    Fresh buffers cost every read-out their page faults (a visible share of a large credal
    read-out; docs/results/speed.md). One per thread,
    so read-outs in concurrent threads never share buffers; what a thread keeps is its largest
    chunk's entries (about 32 bytes per node a row reaches, times `CHUNK` rows). No
    output of `read_out` is a view into them.
    """
    scratch = getattr(_THREAD, "scratch", None)
    if scratch is None:
        scratch = _THREAD.scratch = Scratch()
    return scratch


@dataclass(frozen=True)
class Readout:
    """Outputs of one read-out; None for an output the call did not ask for."""

    evidence: Evidence | None
    novelty: Novelty | None
    score: np.ndarray | None = None


@dataclass(frozen=True)
class CredalReadout:
    """The credal read-out of a batch from one firing pass (`FERLClassifier.credal_readout`).

    Attributes
    ----------
    credal_set : ndarray of shape (n_samples, n_classes), bool
        Interval-dominance set S(x) (paper eq. 4), what ``predict_set`` returns; columns follow
        ``classes_``, a row of all True is an abstention.
    evidence : Evidence
        The combined masses (section 3.2), what ``evidence`` returns.
    ood_score : ndarray of shape (n_samples,), float64, finite
        What ``ood_score`` returns for the same ``kind``; higher means more novel.
    """

    credal_set: np.ndarray
    evidence: Evidence
    ood_score: np.ndarray


def _concat(cls, parts):
    if len(parts) == 1:
        return parts[0]
    return cls(*(None if getattr(parts[0], f.name) is None
                 else np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(cls)))


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
        The leaf NLLs of ``X`` (`ferl.novelty.scores.Novelty.leaf_nll`) when already computed.

    Returns
    -------
    Firing
        ``fired`` with ``phi`` replaced by ``r_o(x) phi_o(x)``.
    ndarray of shape (n_samples, n_nodes), float64 in [0, 1]
        The reliabilities ``r_o(x)`` (`ferl.novelty.discount.source_reliability`).
    """
    phi0 = fired.dense(fired.phi0)
    score = leaf_typicality(tree, leaves, X, fired, leaf_nll)
    reliability = source_reliability(tree, leaves, phi0, score)
    at, node = fired.entries()
    entry = np.ones_like(fired.phi)
    entry[at] = reliability[fired.rows[at], node]
    return replace(fired, phi=discount(fired.phi, entry)), reliability


def read_out(tree: FuzzyTree, leaves: LeafGaussians, X: np.ndarray, gates: bool, margin: np.ndarray,
             sources: np.ndarray, rule: str, evidence: bool = True, novelty: bool = False,
             novelty_discount: str | None = None, score: str | None = None,
             prototypes: RulePrototypes | None = None,
             weights: tuple[EvidenceWeights, np.ndarray] | None = None,
             point: tuple[str, np.ndarray] | None = None, reference: np.ndarray | None = None) -> Readout:
    """Evidence, novelty and / or an OOD score of validated inputs from one firing pass per chunk.

    Parameters
    ----------
    tree : FuzzyTree
        A fitted tree (with free-feature Gaussians when ``novelty`` or ``score``).
    leaves : LeafGaussians
        Its leaf Gaussians (`ferl.novelty.leaf_gaussians`).
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
        Outputs to compute: the `Evidence`, the per-feature `Novelty`.
    novelty_discount : {None, "typical", "rules", "point"}
        Discount the combined evidence by the reliability of its ``"typical"`` score
        (`ferl.novelty.discount`), or every source by its own (`discounted`), or (``"point"``) the
        combined evidence at the calibrated operating point ``point``; None leaves the paper's
        evidence bit for bit.
    score : str or None
        The kind of OOD score to compute, the product's or an ablation's
        (`ferl.novelty.ood_score.SCORE_KINDS`): ``"ignorance"`` is the
        evidence's ``m(Theta)`` (computed whatever ``evidence`` says), ``"energy"`` the learned
        weights' energy (`ferl.evidence.weights.evidence_energy`; ValueError without ``weights``),
        ``"joint"`` the standardised sum of ``"typical"`` and ``"energy"`` (`ferl.novelty.ood_score`;
        ValueError without ``weights`` and ``reference``), the others come from
        `ferl.novelty.ood_score.score_totals` and, for ``"typical"`` and ``"prototype"``,
        `ferl.novelty.prototypes`; None for none.
    prototypes : RulePrototypes or None
        The tree's rule prototypes; needed by the kinds of `ferl.novelty.prototypes`.
    weights : (EvidenceWeights, ndarray of shape (n_features, 2)) or None
        Learned weights of evidence and the training feature ranges (`ferl.evidence.weights`): the
        evidence combines the weighted rules instead of the nodes' masses; None for the paper's.
    point : (kind, ndarray of shape (2,)) or None
        The discount's calibrated operating point (`ferl.novelty.discount.fit_operating_point`): the
        kind of score it reads (a kind of `ferl.novelty.ood_score.OOD_KINDS`) and ``(tau, width)``;
        needed by ``novelty_discount="point"``.
    reference : ndarray of shape (4,) or None
        The ``"joint"`` score's held-out moments (`ferl.novelty.ood_score.fit_reference`).

    Returns
    -------
    Readout

    Raises
    ------
    ValueError
        ``score`` neither None nor one of `ferl.novelty.ood_score.SCORE_KINDS`, ``"energy"`` or
        ``"joint"`` without what they need.
    """
    if score is not None and score not in SCORE_KINDS:
        raise ValueError(f"unknown OOD score kind {score!r}; expected one of {list(SCORE_KINDS)}")
    if score in ("energy", "joint") and weights is None:
        raise ValueError(f"the {score!r} OOD score needs a model fitted with evidence_weights='learned'")
    if score == "joint" and reference is None:
        raise ValueError("the 'joint' OOD score needs held-out reference inputs: call "
                         "calibrate_novelty(X_val) first")
    evidence = evidence or score in ("ignorance", "energy", "joint")
    discount = novelty_discount if evidence else None
    point_kind = point[0] if discount == "point" else None
    wanted = {score, point_kind}  # the scores this pass must compute
    parts_e, parts_n, parts_s = [], [], []
    scratch = thread_scratch()  # every output below is computed from `fired` before the next chunk
    for start in range(0, X.shape[0], CHUNK):
        rows = X[start:start + CHUNK]
        fired = tree.sparse_firing(rows, gates, margin, scratch)
        leaf_nll = None
        if novelty:
            parts_n.append(analyse(tree, leaves, rows, fired, prototypes))
            leaf_nll = parts_n[-1].leaf_nll
        want_nll = discount == "rules" and leaf_nll is None
        if score in TOTAL_KINDS:
            values, nll = score_totals(tree, leaves, rows, fired, score, want_nll)
            parts_s.append(values)
            leaf_nll = leaf_nll if nll is None else nll
        if wanted & {"typical", "joint"} or discount == "typical":  # the "leaf" score's tail is half of it
            if score != "leaf":
                values, nll = score_totals(tree, leaves, rows, fired, "leaf", want_nll)
                leaf_nll = leaf_nll if nll is None else nll
            typical = prototype_kind("typical", rows, leaves, prototypes, values)
            if score == "typical":
                parts_s.append(typical)
        if score == "prototype":
            parts_s.append(prototype_kind(score, rows, leaves, prototypes))
        if evidence:
            raw = fired  # the scores read the paper's firings whatever the discount
            if discount == "rules":
                fired = discounted(tree, leaves, rows, fired, leaf_nll)[0]
            if weights is None:
                parts_e.append(combine_sparse(fired, tree.value, sources, rule))
            else:
                strengths = rule_sources(rows, weights[1], fired.dense(fired.phi, tree.is_leaf))
                want_energy = bool(wanted & {"energy", "joint"})
                if want_energy and fired is raw:  # one product with the weights gives both
                    ev, energy = evidence_from_weights(weights[0], strengths, energy=True)
                else:
                    ev = evidence_from_weights(weights[0], strengths)
                    if want_energy:
                        energy = evidence_energy(weights[0], rule_sources(rows, weights[1],
                                                                          raw.dense(raw.phi, tree.is_leaf)))
                parts_e.append(ev)
                if want_energy:
                    joint = joint_score(typical, energy, reference) if "joint" in wanted else None
                    if score in ("energy", "joint"):
                        parts_s.append(energy if score == "energy" else joint)
            if discount == "typical":
                reliability = typical_reliability(typical, prototypes.discount)
                parts_e[-1] = discount_evidence(parts_e[-1], reliability)
            elif discount == "point":
                own = typical if point_kind == "typical" else energy if point_kind == "energy" else joint
                parts_e[-1] = discount_evidence(parts_e[-1], point_reliability(point[1], own))
            if score == "ignorance":
                parts_s.append(parts_e[-1].ignorance.copy())
    return Readout(_concat(Evidence, parts_e) if evidence else None,
                   _concat(Novelty, parts_n) if novelty else None,
                   (parts_s[0] if len(parts_s) == 1 else np.concatenate(parts_s)) if score else None)
