"""A short Markdown rendering of one FERL explanation for the run report.

:meth:`ferl.explain.Explanation.to_markdown` lists every class and every fired rule, which on a
20-class run is a page of zeros per example. :func:`short_markdown` keeps what a reader looks at:
the decision, the ``top`` classes by pignistic probability (plus the true class where it is not
among them), the sufficient rules (learned weights of evidence: the fewest rules that decide the
prediction over the runner-up), the ``top`` rules by firing with their three largest masses, and the anomalous
attributes. The certified radius is printed only where it is informative (above 0; 0: nothing
certified); :func:`radius_sentence` reads it in words for ``predict``'s page.
"""

from __future__ import annotations

import numpy as np

from ferl.evidence.sufficiency import SUFFICIENT_SHARE, sufficient_rule_counts
from ferl.explain import NO_MARGIN, PRIOR_DECIDES, Explanation, before_discount

__all__ = ["radius_sentence", "short_markdown", "sufficient_section"]


def radius_sentence(radius: float, prediction: object) -> str:
    """One sentence reading a decision's certified radius (`cbm.heads.operating.certified_radius`).

    Parameters
    ----------
    radius : float, >= 0 or inf
        The certified l_inf radius in concept units.
    prediction : object
        The decided class.

    Returns
    -------
    str
        A sentence naming the radius and what it certifies, or that nothing is certified (0).
    """
    cls = _md(prediction)
    if radius >= 1.0:  # a box of half-width 1 holds [0, 1]^k
        return (f"Certified radius {radius:.3g}: every concept vector in [0, 1] gets the class {cls}, "
                "whatever the concept probabilities.")
    if radius > 0:
        return (f"Certified radius {radius:.3g}: any change of at most {radius:.3g} in each concept "
                f"probability (within [0, 1]) leaves the class {cls}.")
    return "Certified radius 0: no change of the concept probabilities is certified to leave the class."


def _md(value: object) -> str:
    """A table cell: pipes escaped."""
    return str(value).replace("|", "\\|")


def _classes(ex: Explanation, top: int, truth: object | None) -> list[str]:
    order = list(np.argsort(-np.asarray(ex.probability), kind="stable")[:top])
    names = [str(c) for c in ex.classes]
    if truth is not None and str(truth) in names and names.index(str(truth)) not in order:
        order.append(names.index(str(truth)))
    lines = ["| class | BetP | belief | plausibility | in set |", "|---|---:|---:|---:|:---:|"]
    members = {str(c) for c in ex.credal_set}
    for i in order:
        mark = "✓" if names[i] in members else ""
        true = " (true)" if truth is not None and names[i] == str(truth) else ""
        lines.append(f"| {_md(names[i])}{true} | {ex.probability[i]:.3f} | {ex.belief[i]:.3f} | "
                     f"{ex.plausibility[i]:.3f} | {mark} |")
    rest = len(names) - len(order)
    if rest > 0:
        shown = set(order)
        high = max(ex.probability[i] for i in range(len(names)) if i not in shown)
        lines += ["", f"{rest} other classes, each with BetP ≤ {high:.3f}."]
    return lines


def _rules(ex: Explanation, top: int) -> list[str]:
    if not ex.sources:
        return ["No rule fired: the input lies outside the training support (vacuous mass)."]
    lines = ["| rule | firing | IF | THEN | largest masses |", "|---:|---:|---|---|---|"]
    for s in ex.sources[:top]:
        order = np.argsort(-np.asarray(s.mass), kind="stable")[:3]
        masses = ", ".join(f"{_md(ex.classes[i])}: {s.mass[i]:.3f}" for i in order if s.mass[i] > 0)
        rid = s.rule_id if s.rule_id is not None else f"node {s.node}"
        premise = " AND ".join(s.conditions) or "TRUE"
        lines.append(f"| {rid} | {s.firing:.3f} | {_md(premise)} | {_md(s.prediction)} | "
                     f"{masses + ', ' if masses else ''}Θ: {s.ignorance:.3f} |")
    rest = ex.sources[top:]
    if rest:
        lines += ["", f"{len(rest)} more rule{'s' if len(rest) > 1 else ''} fired (together "
                      f"{sum(s.firing for s in rest):.3f})."]
    return lines


def _sufficient(ex: Explanation, top: int) -> list[str]:
    """One paragraph: the sufficient rules (`ferl.explain.Explanation.decisive`), at most ``top``."""
    if ex.margin is None:
        return []
    if ex.margin <= 0:
        return [NO_MARGIN, ""]
    head = (f"**Sufficient rules**: with the prior they alone reach {100 * SUFFICIENT_SHARE:g} % of the "
            f"margin log Pl({_md(ex.prediction)}) − log Pl({_md(ex.runner_up)}) = {ex.margin:.3f} nats"
            f"{before_discount(ex.reliability)}")
    if not ex.decisive:
        return [f"{head}. {PRIOR_DECIDES}", ""]
    rules = "; ".join(f"{_md(r)} (s(x) = {s:.3f}, {100 * q:.1f} % of the margin)"
                      for r, s, _, q in ex.decisive[:top])
    rest = len(ex.decisive) - top
    more = f"; and {rest} more" if rest > 0 else ""
    return [f"{head}: {rules}{more}.", ""]


def short_markdown(ex: Explanation, top: int = 5, truth: object | None = None) -> str:
    """Markdown of one explanation: decision, top classes, top fired rules, anomalous attributes.

    Parameters
    ----------
    ex : ferl.explain.Explanation
    top : int
        Classes and rules listed (>= 1).
    truth : object, optional
        The true class, listed even when it is not among the ``top`` classes.

    Returns
    -------
    str

    Raises
    ------
    ValueError
        ``top`` is below 1.
    """
    if isinstance(top, bool) or not isinstance(top, int | np.integer) or top < 1:
        raise ValueError(f"top must be a positive integer, got {top!r}")
    n = len(ex.classes)
    verdict = (f"abstains (credal set = all {n} classes)" if ex.abstain else
               "credal set {" + ", ".join(_md(c) for c in ex.credal_set) + "}")
    radius = (f", certified radius {ex.robustness_radius:.3g} (the decision holds for any change of at "
              "most this in each concept)" if ex.robustness_radius > 0 else "")
    lines = [f"**Prediction: {_md(ex.prediction)}**, {verdict}. Ignorance m(Θ) = {ex.ignorance:.3f}, "
             f"conflict {ex.conflict:.3f}, leaf firing {ex.firing:.3f}, "
             f"{ex.ood_kind} OOD score {ex.ood_score:.3g}{radius}.",
             "", *_classes(ex, top, truth), "", *_sufficient(ex, top), "**Evidence that fired**", "",
             *_rules(ex, top), "",
             "**Anomalous attributes**" + ("" if ex.ood_kind == "typical" else
                                           " (scores: parts of the typical OOD score)"), "",
             "| attribute | score | routing loss | leaf deviation |", "|---|---:|---:|---:|"]
    lines += [f"| {_md(a.name)} | {a.score:.3g} | {a.routing_loss:.3f} | {a.deviation:.3g} |"
              for a in ex.anomalous_features]
    return "\n".join(lines)


#: Bins of the sufficient rules' count in the report: one per count up to 5, then ranges.
COUNT_BINS = ((0, 0), (1, 1), (2, 2), (3, 3), (4, 4), (5, 5), (6, 10), (11, None))


def sufficient_section(model, X: np.ndarray, label: str) -> list[str]:
    """Markdown lines: how many sufficient rules the explanations of ``X`` list, over the split.

    Parameters
    ----------
    model : ferl.FERLClassifier
        The head's fitted model; one that reads its evidence from the tree has no sufficient rules
        and gets no lines.
    X : ndarray of shape (n, k), float in [0, 1]
        The test split's concept vectors, in the head's inputs.
    label : str
        The head's name in the text.

    Returns
    -------
    list of str
    """
    if getattr(model, "evidence_weights_", None) is None or len(X) == 0:
        return []
    counts = sufficient_rule_counts(model, X)
    q50, q90 = np.quantile(counts, [0.5, 0.9])
    shares = [np.mean((counts >= a) & (counts <= (np.inf if b is None else b))) for a, b in COUNT_BINS]
    bins = ", ".join(f"{a if a == b else (f'{a}–{b}' if b else f'> {a - 1}')}: {100 * v:.1f} %"
                     for (a, b), v in zip(COUNT_BINS, shares, strict=True))
    lines = [f"How much an explanation of {label} needs to say: its sufficient rules, the fewest whose "
             f"weights of evidence alone, with the prior, reach {100 * SUFFICIENT_SHARE:g} % of the "
             "margin of log-plausibility of the prediction over the runner-up. Over the "
             f"{len(counts)} test images: median {q50:g}, 90th percentile {q90:g}, at most 10 rules for "
             f"{100 * np.mean(counts <= 10):.1f} % of them; images by the number of sufficient rules: "
             f"{bins}."]
    return [*lines, ""]
