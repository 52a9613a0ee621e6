"""A short Markdown rendering of one FERL explanation for the run report.

:meth:`ferl.explain.Explanation.to_markdown` lists every class and every fired rule, which on a
20-class run is a page of zeros per example. :func:`short_markdown` keeps what a reader looks at:
the decision, the ``top`` classes by pignistic probability (plus the true class where it is not
among them), the ``top`` rules by firing with their three largest masses, and the anomalous
attributes. The certified radius is printed only where it is informative (above 0: a gate active or
a tied top class make it 0 by construction).
"""

from __future__ import annotations

import numpy as np

from ferl.explain import Explanation

__all__ = ["short_markdown"]


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
             "", *_classes(ex, top, truth), "", "**Evidence that fired**", "", *_rules(ex, top), "",
             "**Anomalous attributes**" + ("" if ex.ood_kind == "typical" else
                                           " (scores: parts of the typical OOD score)"), "",
             "| attribute | score | routing loss | leaf deviation |", "|---|---:|---:|---:|"]
    lines += [f"| {_md(a.name)} | {a.score:.3g} | {a.routing_loss:.3f} | {a.deviation:.3g} |"
              for a in ex.anomalous_features]
    return "\n".join(lines)
