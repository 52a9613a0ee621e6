"""Per-sample explanation of a FERL decision, with Markdown and JSON renderings for reports.

An `Explanation` gathers, for one input: the evidence sources that fired (rules, i.e. leaves, and
with ``evidence_nodes="all"`` also internal nodes) with their firing ``phi_o``, their reliability
``r_o`` (1 unless the model's ``novelty_discount`` is ``"rules"``, `ferl.evidence.discount`) and their masses
``m_o({c}) = r_o phi_o p_o(c)``, ``m_o(Theta) = 1 - r_o phi_o`` (paper section 3.2); the combined
belief, plausibility, ignorance, conflict and pignistic probability; the credal set and the
abstention (eq. 4), discounted as a whole by ``r(x)`` when ``novelty_discount`` is ``"typical"``
(`ferl.novelty.discount`); the OOD score of the kind the product flags with (`ferl.novelty.default_kind`,
named in the explanation) and the anomalous attributes (`ferl.novelty.scores`); and the certified
robustness radius (`ferl.tree.certificate`; for learned weights of evidence `ferl.evidence.robustness`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from ferl.evidence.algebra import combine, discount, discount_evidence
from ferl.evidence.sufficiency import SUFFICIENT_SHARE, sufficient_sources
from ferl.evidence.weights import evidence_from_weights, rule_sources
from ferl.novelty.scores import AnomalousFeature
from ferl.rules import _plain, path_conditions

__all__ = ["NO_MARGIN", "PRIOR_DECIDES", "FiredSource", "Explanation", "before_discount", "build_explanation"]

#: What an explanation says where the prior alone reaches the sufficient share of the margin.
PRIOR_DECIDES = "The prior alone reaches it: together, the rules add nothing to the prediction's lead."
#: What an explanation says where the plausibilities' order differs from BetP's (margin <= 0).
NO_MARGIN = ("**Sufficient rules**: none: the prediction (the largest BetP) does not lead the runner-up "
             "in plausibility, so no rules decide it over the runner-up.")


@dataclass(frozen=True)
class FiredSource:
    """One evidence source with non-zero firing.

    Attributes
    ----------
    node : int
        Node index in the tree arrays.
    rule_id : int or None
        Rule number (position in ``rules_``) for a leaf, None for an internal node.
    conditions : tuple of str
        Conditions on the root-to-node path, one merged condition per feature
        (`ferl.rules.path_conditions`).
    firing : float
        ``phi_o(x)`` in (0, 1], after the gates.
    reliability : float
        ``r_o(x)`` in [0, 1]: how typical the input is for the source (1 with the discount off; 0 where
        its exponential underflows, far off the training data with the gates off).
    mass : tuple of float
        ``m_o({c}) = r_o phi_o p_o(c)`` per class (``classes_`` order).
    ignorance : float
        ``m_o(Theta) = 1 - r_o phi_o``.
    prediction : object
        Class with the largest consequent probability ``p_o``.
    """

    node: int
    rule_id: int | None
    conditions: tuple
    firing: float
    reliability: float
    mass: tuple
    ignorance: float
    prediction: object


@dataclass(frozen=True)
class Explanation:
    """Why FERL decided what it did for one input (see the module docstring).

    Attributes
    ----------
    classes : tuple
        Class labels (``classes_`` order); per-class tuples below follow it.
    prediction : object
        ``argmax BetP`` without the ``"typical"`` discount (what ``predict`` returns).
    probability, belief, plausibility : tuple of float
        ``BetP(c)``, ``Bel(c) = m({c})``, ``Pl(c) = m({c}) + m(Theta)``.
    ignorance, conflict : float
        ``m(Theta)`` and the normalised-away conflict ``1 - Z``.
    credal_set : tuple
        Labels in the interval-dominance set ``S(x)``.
    abstain : bool
        ``S(x)`` is the whole frame.
    firing : float
        Total leaf firing (``1 -`` the routing mass lost to the gates).
    ood_score : float
        OOD score of kind ``ood_kind`` (``FERLClassifier.ood_score``), higher = more novel.
    ood_kind : str
        Its kind, one of `ferl.novelty.ood_score.OOD_KINDS`: by default the one the product flags
        with (`ferl.novelty.default_kind`).
    anomalous_features : tuple of AnomalousFeature
        Most anomalous attributes, highest first; their scores are the parts of the ``typical``
        score (`ferl.novelty.scores.Novelty.feature_scores`), whatever ``ood_kind``.
    robustness_radius : float
        Certified ``l_inf`` radius, ``>= 0`` or ``inf`` (`FERLClassifier.robustness_radius`: the
        class of the tree's ``P_T`` for the tree's evidence, the predicted class for learned
        weights of evidence; 0: nothing certified).
    sources : tuple of FiredSource
        Evidence sources that fired, by decreasing firing.
    reliability : float
        ``r(x)`` in [0, 1] of the combined evidence (`ferl.novelty.discount`): the masses above are
        the combined ones discounted by it (1 unless ``novelty_discount`` is ``"typical"``).
    decisive : tuple of (str, float, float, float)
        With learned weights of evidence (``evidence_weights="learned"``): the sufficient rules, the
        fewest whose weights of evidence alone, with the prior, reach
        `ferl.evidence.sufficiency.SUFFICIENT_SHARE` of the margin ``log Pl(prediction) -
        log Pl(runner_up)`` (`ferl.evidence.sufficiency.sufficient_sources`), strongest first, as (rule,
        source strength s(x), its part of the margin in nats, that part's share of the margin);
        empty for the tree's evidence, where the prior alone decides, or where the margin is not
        positive (BetP's top class is not the plausibilities': a near tie).
    runner_up : object or None
        The class with the second largest BetP (None for a single class).
    margin : float or None
        ``log Pl(prediction) - log Pl(runner_up)`` in nats with learned weights; None for the
        tree's evidence or a single class.
    prior : float or None
        The prior's part of ``margin`` in nats (the weights' intercepts); None where ``margin`` is.
    """

    classes: tuple
    prediction: object
    probability: tuple
    belief: tuple
    plausibility: tuple
    ignorance: float
    conflict: float
    credal_set: tuple
    abstain: bool
    firing: float
    ood_score: float
    ood_kind: str
    anomalous_features: tuple
    robustness_radius: float
    sources: tuple
    reliability: float = 1.0
    decisive: tuple = ()
    runner_up: object = None
    margin: float | None = None
    prior: float | None = None

    def to_dict(self) -> dict:
        """JSON-friendly nested dict (per-class values as a list of records; an infinite
        ``robustness_radius`` as None)."""
        return {
            "prediction": self.prediction,
            "credal_set": list(self.credal_set),
            "abstain": self.abstain,
            "ignorance": self.ignorance,
            "conflict": self.conflict,
            "firing": self.firing,
            "ood_score": self.ood_score,
            "ood_kind": self.ood_kind,
            # JSON has no infinity: None where every point of the domain keeps the class
            "robustness_radius": self.robustness_radius if np.isfinite(self.robustness_radius) else None,
            "reliability": self.reliability,
            "classes": [
                {"class": c, "probability": p, "belief": b, "plausibility": pl,
                 "in_set": c in self.credal_set}
                for c, p, b, pl in zip(self.classes, self.probability, self.belief, self.plausibility,
                                       strict=True)
            ],
            "anomalous_features": [a._asdict() for a in self.anomalous_features],
            "runner_up": self.runner_up,
            "margin": self.margin,
            "prior": self.prior,
            "decisive": [{"rule": r, "strength": s, "weight": w, "share": q} for r, s, w, q in self.decisive],
            "sources": [
                {"node": s.node, "rule_id": s.rule_id, "conditions": list(s.conditions), "firing": s.firing,
                 "reliability": s.reliability,
                 "mass": [{"class": c, "m": m} for c, m in zip(self.classes, s.mass, strict=True)],
                 "ignorance": s.ignorance, "prediction": s.prediction}
                for s in self.sources
            ],
        }

    def to_json(self, indent: int | None = 2) -> str:
        """`to_dict` as a JSON string."""
        return json.dumps(self.to_dict(), indent=indent)

    def to_markdown(self, digits: int = 3) -> str:
        """Markdown report: decision, per-class table, fired sources, anomalous attributes.

        Sources whose firing rounds to zero at ``digits`` are counted in one line rather than
        listed (the strongest source is always listed); `to_dict` keeps every source. The sources'
        reliabilities are a column only where one of them is below 1 (`novelty_discount`). The unbounded
        scores (OOD score, attribute scores) are printed in scientific notation from 1e6 on.

        Raises
        ------
        ValueError
            ``digits`` is not a non-negative integer.
        """
        if isinstance(digits, bool) or not isinstance(digits, int | np.integer) or digits < 0:
            raise ValueError(f"digits must be a non-negative integer, got {digits!r}")
        f = f".{digits}f"
        members = ", ".join(_md(c) for c in self.credal_set)
        verdict = ("abstains (credal set = every class)" if self.abstain
                   else f"interval-dominance credal set {{{members}}}")
        lines = [
            f"**Prediction: {_md(self.prediction)}**, {verdict}.",
            "",
            f"Ignorance m(Θ) = {self.ignorance:{f}}, conflict = {self.conflict:{f}}, leaf firing = "
            f"{self.firing:{f}}, {self.ood_kind} OOD score = {_number(self.ood_score, digits)}, "
            f"certified radius = {self.robustness_radius:.3g}"
            + (f", evidence reliability r(x) = {self.reliability:{f}}." if self.reliability != 1.0 else "."),
            "",
            "| class | BetP | belief | plausibility | in set |",
            "|---|---:|---:|---:|:---:|",
        ]
        for c, p, b, pl in zip(self.classes, self.probability, self.belief, self.plausibility, strict=True):
            mark = "✓" if c in self.credal_set else ""
            lines.append(f"| {_md(c)} | {p:{f}} | {b:{f}} | {pl:{f}} | {mark} |")
        if self.margin is not None and self.margin <= 0:
            lines += ["", NO_MARGIN]
        if self.margin is not None and self.margin > 0:
            lines += ["", f"**Sufficient rules**: with the prior ({self.prior:{f}} nats) they alone reach "
                          f"{100 * SUFFICIENT_SHARE:g} % of the margin log Pl({_md(self.prediction)}) − "
                          f"log Pl({_md(self.runner_up)}) = {self.margin:{f}} nats"
                          f"{before_discount(self.reliability)}: without the rules left out, "
                          f"{_md(self.prediction)} still leads {_md(self.runner_up)}.", ""]
            rows = [f"| {_md(r)} | {s:{f}} | {w:{f}} | {100 * q:.1f} % |" for r, s, w, q in self.decisive]
            head = ["| rule | strength s(x) | part of the margin (nats) | share of the margin |",
                    "|---|---:|---:|---:|"]
            lines += [*head, *rows] if rows else [PRIOR_DECIDES]
        lines += ["", "**Evidence that fired**", ""]
        if not self.sources:
            lines.append("No rule fired: the input lies outside the training support (vacuous mass).")
        else:
            # rules whose firing rounds to 0 at `digits` are counted, not listed (the strongest is kept)
            shown = [s for s in self.sources if round(s.firing, digits) > 0] or list(self.sources[:1])
            discounted = any(s.reliability != 1.0 for s in self.sources)  # else a column of 1s
            numbers = ["rule", "firing", "reliability"] if discounted else ["rule", "firing"]
            lines += ["| " + " | ".join([*numbers, "IF", "THEN", "masses"]) + " |",
                      "|" + "---:|" * len(numbers) + "---|---|---|"]
            for s in shown:
                masses = ", ".join(f"{_md(c)}: {m:{f}}" for c, m in zip(self.classes, s.mass, strict=True)
                                   if m > 0)
                rid = s.rule_id if s.rule_id is not None else f"node {s.node}"
                premise = " AND ".join(s.conditions) or "TRUE"
                trust = f" {s.reliability:{f}} |" if discounted else ""
                lines.append(f"| {rid} | {s.firing:{f}} |{trust} {_md(premise)} | {_md(s.prediction)} | "
                             f"{masses}, Θ: {s.ignorance:{f}} |")
            if len(shown) < len(self.sources):
                rest = [s.firing for s in self.sources[len(shown):]]  # by decreasing firing
                lines += ["", f"{len(rest)} more rule{'s' if len(rest) > 1 else ''} fired below "
                              f"{0.5 * 10.0 ** -digits:g} (together {sum(rest):.2g}), not listed."]
        parts = "" if self.ood_kind == "typical" else " (scores: parts of the typical OOD score)"
        lines += ["", f"**Anomalous attributes**{parts}", "",
                  "| attribute | score | routing loss | leaf deviation | free-feature z² |",
                  "|---|---:|---:|---:|---:|"]
        for a in self.anomalous_features:
            lines.append(f"| {_md(a.name)} | {_number(a.score, digits)} | {a.routing_loss:{f}} | "
                         f"{_number(a.deviation, digits)} | {_number(a.anomaly, digits)} |")
        return "\n".join(lines)


def before_discount(reliability: float) -> str:
    """Words to follow the margin of the sufficient rules where the evidence shown is discounted
    (``reliability`` below 1): the margin is the undiscounted evidence's, the rules' parts add up to it."""
    return f" (of the evidence before its discount by r(x) = {reliability:.3f})" if reliability < 1 else ""


def _number(value: float, digits: int) -> str:
    """An unbounded score (nats) with ``digits`` decimals, in scientific notation from 1e6 on: the
    finite scores of an input far off the training range reach 1e200 (standardised distances are
    clipped at `ferl.novelty.linalg.Z_MAX`), some 200 digits in fixed notation."""
    return f"{value:.{digits}f}" if abs(value) < 1e6 else f"{value:.{digits}e}"


def _md(value) -> str:
    return str(value).replace("|", "\\|")


def build_explanation(model, x: np.ndarray, phi: np.ndarray, reliability: np.ndarray,
                      anomalous: list[AnomalousFeature],
                      ood_score: float, ood_kind: str, radius: float,
                      evidence_reliability: float = 1.0) -> Explanation:
    """Assemble the `Explanation` of one validated input.

    Parameters
    ----------
    model : FERLClassifier
        The fitted estimator (its tree, classes, feature names and evidence settings).
    x : ndarray of shape (1, n_features), float64
        The validated input (the learned weights' single-condition rules read it).
    phi : ndarray of shape (1, n_nodes)
        Node firings of the input, gates as configured.
    reliability : ndarray of shape (1, n_nodes)
        Source reliabilities (all ones with the discount off).
    anomalous : list of AnomalousFeature
        Ranked attributes of the input.
    ood_score : float
        OOD score of the input, of kind ``ood_kind``.
    ood_kind : str
        Its kind (`ferl.novelty.ood_score.OOD_KINDS`).
    radius : float
        Certified robustness radius of the input.
    evidence_reliability : float in [0, 1], default=1.0
        Reliability of the combined evidence (`ferl.evidence.discount_evidence`).

    Returns
    -------
    Explanation
    """
    tree = model.tree_
    classes = tuple(_plain(c) for c in model.classes_)
    weights = model._weights()
    if weights is None:
        paper = combine(discount(phi, reliability), tree.value, model._sources(), model.combination)
    else:
        leaf_phi = discount(phi, reliability)[:, tree.is_leaf]
        strengths = rule_sources(x, weights[1], leaf_phi)
        paper = evidence_from_weights(weights[0], strengths)
    ev = discount_evidence(paper, np.array([evidence_reliability]))
    sources = []
    leaves = np.flatnonzero(tree.is_leaf)
    rule_of = {int(node): k for k, node in enumerate(leaves)}
    fired = np.flatnonzero(model._sources() & (phi[0] > 0))
    for node in fired[np.argsort(-phi[0, fired], kind="stable")]:
        p, r = float(phi[0, node]), float(reliability[0, node])
        sources.append(FiredSource(
            node=int(node), rule_id=rule_of.get(int(node)),
            conditions=tuple(c.text for c in path_conditions(tree, int(node), model.feature_names_)),
            firing=p, reliability=r, mass=tuple(float(v) for v in r * p * tree.value[node]),
            ignorance=1.0 - r * p,
            prediction=classes[int(np.argmax(tree.value[node]))],
        ))
    in_set = ev.credal_set[0]
    proba = ev.pignistic[0]
    decisive, runner_up, margin, prior = (), None, None, None
    if weights is not None and len(classes) > 1:
        first, second = np.argsort(-paper.pignistic[0], kind="stable")[:2]
        kept, contribution, margin, prior = sufficient_sources(weights[0], strengths[0], int(first),
                                                               int(second))
        runner_up = classes[int(second)]
        n_features = len(model.feature_names_)

        def name(j):
            if j < n_features:
                return f"{model.feature_names_[j]} is high"
            conditions = path_conditions(tree, int(leaves[j - n_features]), model.feature_names_)
            return f"rule {j - n_features}: " + (" AND ".join(c.text for c in conditions) or "TRUE")

        decisive = tuple((name(int(j)), float(strengths[0, j]), float(w), float(w / margin))
                         for j, w in zip(kept, contribution, strict=True))
    elif len(classes) > 1:
        runner_up = classes[int(np.argsort(-paper.pignistic[0], kind="stable")[1])]
    return Explanation(
        classes=classes, prediction=classes[int(np.argmax(paper.pignistic[0]))],  # `predict`'s label
        probability=tuple(float(v) for v in proba), belief=tuple(float(v) for v in ev.belief[0]),
        plausibility=tuple(float(v) for v in ev.plausibility[0]),
        ignorance=float(ev.ignorance[0]), conflict=float(ev.conflict[0]),
        credal_set=tuple(c for c, keep in zip(classes, in_set, strict=True) if keep),
        abstain=bool(ev.abstain[0]), firing=float(phi[0, leaves].sum()), ood_score=float(ood_score),
        ood_kind=ood_kind, anomalous_features=tuple(anomalous), robustness_radius=float(radius),
        sources=tuple(sources),
        reliability=float(evidence_reliability), decisive=decisive, runner_up=runner_up, margin=margin,
        prior=prior,
    )

