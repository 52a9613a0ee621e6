"""Rules of a fitted fuzzy tree: one rule per leaf, one merged fuzzy condition per feature.

A rule's conditions on one feature are merged into one (`ferl.tree.intervals`), so no rule names a
feature twice. How a merged condition reads:

* **learned ramps** (paper eq. 1): ``name ≤ θ ± h``, ``name > θ ± h`` or
  ``name is between A ± a and B ± b``. A bound ``c ± w`` is a fuzzy band: the condition's
  membership is 0 on one side of ``[c - w, c + w]``, 1 on the other and monotone inside. A bound
  set by one split is that split's own ``θ ± h`` (linear ramp); when several splits bound the same
  side, the band runs from where the product of their memberships leaves 0 to where it reaches 1.
  Band ends are exact; the ramp between them is a product of linear ramps.
* **fixed partitions** (compact variant): a linguistic term, ``name is low`` or
  ``name is not high``, whenever the product of the path's memberships equals that term's
  membership exactly, e.g. ``is not high AND is not low`` reads ``is medium``
  (`ferl.tree.partitions` is a Ruspini partition). Other combinations (``is high AND is not medium``
  is high squared) fall back to the numeric form above.
* **band-only conditions**: when the membership never reaches 1 (a path that cuts the same band
  in both directions, e.g. ``x > 3.44 ± 0.59`` then ``x ≤ 3.44 ± 0.59``), the condition reads
  ``name is between lo and hi (membership ≤ p)``: its support and its peak.
* rarer shapes, from fixed sets only: ``name = v`` where the membership is positive at one value
  (tied quantiles), and pieces joined by ``or`` where it is positive on separate intervals
  (``is not medium AND is not high`` is ``≤ 0.30 ± 0.10 or is between 0.60 and 0.80
  (membership ≤ 0.25)``). A path whose membership is 0 everywhere reads ``holds nowhere``.

Whether the end of an interval belongs to it is not shown (it matters only on a step).

Thresholds are printed with at least ``digits`` decimals and enough decimals to show the band's
first significant digit. Beyond the paper, which prints no rules.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass

import numpy as np

from ferl.tree.firing import Firing
from ferl.tree.fuzzy_tree import SPLIT_FIXED, SPLIT_LEARNED, FuzzyTree
from ferl.tree.intervals import Factor, Span, same_membership, spans
from ferl.tree.partitions import SET_NAMES

__all__ = ["COLUMN_LEGEND", "Condition", "Rule", "path_conditions", "extract_rules", "fires_alone",
           "format_rules", "format_summary"]


@dataclass(frozen=True)
class Condition:
    """The merged fuzzy condition that a root-to-node path puts on one feature.

    Attributes
    ----------
    feature : int
        Column index.
    name : str
        Feature name.
    text : str
        Human-readable condition (module docstring), e.g. ``"striped is between 0.22 ± 0.03 and
        0.79 ± 0.05"`` or ``"size is not low"``.
    nodes : tuple of int
        Internal nodes of the path that test the feature, root first.
    peak : float in [0, 1]
        Largest membership the condition reaches; below 1 for a band-only condition.
    """

    feature: int
    name: str
    text: str
    nodes: tuple
    peak: float


@dataclass(frozen=True)
class Rule:
    """A rule (leaf): IF all conditions THEN the consequent class distribution.

    Attributes
    ----------
    rule_id : int
        Position in ``rules_`` (leaves in node order).
    node : int
        Leaf index in the tree arrays.
    conditions : tuple of Condition
        One per feature tested on the path, in order of first test.
    distribution : dict of class label -> float
        Consequent p_o (sums to 1).
    prediction : object
        Class with the largest consequent probability.
    support : float
        Soft support: the sum of training firing x sample weight.
    confidence : float in [0, 1]
        Consequent mass of the predicted class, ``max_c p_o(c)`` (paper section 3.2).
    alone : float in [0, 1] or None
        Share of the training weight on which this rule holds more than half the firing
        (`fires_alone`); None for a model saved before it was recorded.
    """

    rule_id: int
    node: int
    conditions: tuple
    distribution: dict
    prediction: object
    support: float
    confidence: float
    alone: float | None

    def premise(self) -> str:
        """The conditions joined by ``AND`` (``TRUE`` for a root-only tree)."""
        return " AND ".join(c.text for c in self.conditions) or "TRUE"

    def stats(self, digits: int = 2) -> str:
        """``confidence c, support s, alone a`` with ``digits`` decimals."""
        alone = "n/a" if self.alone is None else f"{self.alone:.{digits}f}"
        return f"confidence {self.confidence:.{digits}f}, support {self.support:.{digits}f}, alone {alone}"

    def short(self, digits: int = 2) -> str:
        """``rule <id>: IF a AND b THEN class (confidence c, support s, alone a)``."""
        return f"rule {self.rule_id}: IF {self.premise()} THEN {self.prediction} ({self.stats(digits)})"

    def text(self, digits: int = 2) -> str:
        """`short` with the class distribution: ``... THEN class [class: p, ...] (confidence ...)``."""
        return (f"rule {self.rule_id}: IF {self.premise()} THEN {self.prediction} "
                f"[{self.distribution_text(digits)}] ({self.stats(digits)})")

    def distribution_text(self, digits: int = 2) -> str:
        """``class: p, ...`` over the classes with a positive consequent probability."""
        return ", ".join(f"{k}: {v:.{digits}f}" for k, v in self.distribution.items() if v > 0)

    def to_dict(self) -> dict:
        """JSON-friendly dict: rule_id, node, conditions (texts), features, distribution (list of
        ``{"class", "p"}``), prediction, support, confidence, alone."""
        return {
            "rule_id": self.rule_id, "node": self.node,
            "conditions": [c.text for c in self.conditions],
            "features": [c.name for c in self.conditions],
            "distribution": [{"class": k, "p": v} for k, v in self.distribution.items()],
            "prediction": self.prediction, "support": self.support, "confidence": self.confidence,
            "alone": self.alone,
        }


# ---------------------------------------------------------------------- merged conditions
def path_conditions(tree: FuzzyTree, node: int, feature_names, digits: int = 2) -> tuple:
    """Merged conditions on the root-to-``node`` path, one per feature, in order of first test.

    For a tree figure, the condition that holds on the left branch of internal node ``o`` is the
    entry of ``path_conditions(tree, tree.left[o], ...)`` whose ``feature`` is ``tree.feature[o]``.

    Parameters
    ----------
    tree : FuzzyTree
    node : int
        Any node (root: no condition).
    feature_names : sequence of str, length n_features
    digits : int >= 0
        Minimum decimals of thresholds.

    Returns
    -------
    tuple of Condition
    """
    return _path_conditions(tree, node, feature_names, digits, {})


def _path_conditions(tree: FuzzyTree, node: int, feature_names, digits: int, cache: dict) -> tuple:
    """`path_conditions`, reusing ``cache`` (tests on a feature -> Condition) across sibling paths."""
    tests: dict[int, list] = {}
    child = int(node)
    while tree.parent[child] >= 0:
        parent = int(tree.parent[child])
        tests.setdefault(int(tree.feature[parent]), []).append((parent, bool(tree.left[parent] == child)))
        child = parent
    conds = []
    for f, path in tests.items():
        key = tuple(reversed(path))
        if key not in cache:
            text, peak = _merged(tree, list(key), feature_names[f], digits)
            cache[key] = Condition(f, feature_names[f], text, tuple(o for o, _ in key), peak)
        conds.append(cache[key])
    conds.sort(key=lambda c: c.nodes[0])
    return tuple(conds)


def _merged(tree: FuzzyTree, path: list, name: str, digits: int) -> tuple[str, float]:
    factors = [Factor(tuple(float(v) for v in tree.trap[o]), left, float(tree.threshold[o]),
                      float(tree.half_width[o])) for o, left in path]
    if len(path) == 1 and tree.kind[path[0][0]] == SPLIT_LEARNED:  # the split itself (fast path)
        op = "≤" if path[0][1] else ">"
        return f"{name} {op} {_band(factors[0].trap[2], factors[0].trap[3], factors, digits)}", 1.0
    if all(tree.kind[o] == SPLIT_FIXED for o, _ in path):
        term = _linguistic(tree, path, factors)
        if term is not None:
            return f"{name} {term}", 1.0
    pieces = spans(factors)
    if not pieces:
        return f"{name} holds nowhere (membership 0)", 0.0
    learned = [f for f, (o, _) in zip(factors, path, strict=True) if tree.kind[o] == SPLIT_LEARNED]
    phrases = [_phrase(s, learned, digits) for s in pieces]
    return f"{name} {' or '.join(phrases)}", max(s.peak for s in pieces)


def _phrase(span: Span, learned: list[Factor], digits: int) -> str:
    lo, hi = span.support
    partial = "" if span.core else f" (membership ≤ {span.peak:.{digits}f})"
    if lo == hi:  # a lone value, e.g. where tied quantiles make two fixed sets meet
        return f"= {lo:.{digits}f}{partial}"
    if span.core is None:
        dec = _decimals((hi - lo) / 2, digits)
        return f"is between {lo:.{dec}f} and {hi:.{dec}f}{partial}"
    core_lo, core_hi = span.core
    lower = None if lo == -np.inf else _band(lo, core_lo, learned, digits)
    upper = None if hi == np.inf else _band(core_hi, hi, learned, digits)
    if lower and upper:
        return f"is between {lower} and {upper}"
    if lower:
        return f"> {lower}"
    return f"≤ {upper}" if upper else "is any value"


def _band(start: float, end: float, learned: list[Factor], digits: int) -> str:
    """``c ± w`` for a band ``[start, end]``: a learned split's own ``θ ± h`` when it is that band."""
    centre, half = 0.5 * start + 0.5 * end, 0.5 * (end - start)
    for f in learned:
        if f.trap[2] == start and f.trap[3] == end:
            centre, half = f.threshold, f.half_width
    if half == 0:
        return f"{centre:.{digits}f}"
    dec = _decimals(half, digits)
    return f"{centre:.{dec}f} ± {half:.{dec}f}"


def _decimals(half_width: float, digits: int) -> int:
    if not np.isfinite(half_width) or half_width <= 0:
        return digits
    return max(digits, -math.floor(math.log10(half_width)))


def _linguistic(tree: FuzzyTree, path: list, factors: list[Factor]) -> str | None:
    """``is <term>`` / ``is not <term>`` when it is exactly the product of the path's fixed sets."""
    every = set(range(len(SET_NAMES)))
    allowed = set(every)
    for o, left in path:
        k = int(tree.fuzzy_set[o])
        allowed &= {k} if left else every - {k}
    if len(allowed) == 1:
        (k,) = allowed
        phrase, left = f"is {SET_NAMES[k]}", True
    elif len(allowed) == len(every) - 1:
        (k,) = every - allowed
        phrase, left = f"is not {SET_NAMES[k]}", False
    else:
        return None
    if len(path) == 1:  # one set is its own term
        return phrase
    trap = _term_trap(k, {int(tree.fuzzy_set[o]): f.trap for (o, _), f in zip(path, factors, strict=True)})
    if trap is None or not same_membership(factors, [Factor(trap, left)]):
        return None
    return phrase


def _term_trap(k: int, traps: dict) -> tuple | None:
    """Trapezoid of fixed set ``k`` from the sets a path tests on the feature.

    Reads the quantiles of `ferl.tree.partitions.fixed_partitions` (low ``(-inf, -inf, q1, q2)``, medium
    ``(q1, q2, q3, q4)``, high ``(q3, q4, inf, inf)``); None when the path does not determine them.
    The caller checks the result against the path's own memberships, so a partition of another
    layout only loses the term, it never prints a wrong one.
    """
    if k in traps:
        return traps[k]
    q = [np.nan] * 4
    for j, t in traps.items():
        if j == 0:
            q[0:2] = t[2:4]
        elif j == 1:
            q = list(t)
        else:
            q[2:4] = t[0:2]
    inf = np.inf
    trap = ((-inf, -inf, q[0], q[1]), tuple(q), (q[2], q[3], inf, inf))[k]
    return None if np.isnan(trap).any() else trap


# ---------------------------------------------------------------------- rules
def fires_alone(firing: Firing, sample_weight: np.ndarray, leaves: np.ndarray) -> np.ndarray:
    """Share of the training weight on which each rule holds more than half the firing.

    A sample's leaf firings sum to at most 1 (appendix A.2), so at most one rule fires above 0.5
    for it: the shares sum to at most 1, and the rest of the weight lies in fuzzy bands where no
    rule dominates. Beyond the paper.

    Parameters
    ----------
    firing : Firing
        Sparse (gated) firing of the training inputs (`ferl.tree.firing.Firing`; its ``phi`` is read).
    sample_weight : ndarray of shape (n_samples,), >= 0 with a positive sum
    leaves : ndarray of shape (n_nodes,), bool
        The tree's leaves (rules), in node order.

    Returns
    -------
    ndarray of shape (n_rules,), float64 in [0, 1]
    """
    idx = np.flatnonzero(leaves)
    held = np.zeros(idx.size)
    for j, o in enumerate(idx):
        at = slice(firing.start[o], firing.start[o] + firing.count[o])
        held[j] = sample_weight[firing.rows[at]] @ (firing.phi[at] > 0.5)
    # a dot product and a sum round differently: a rule holding all the weight came out 1 + 2e-16
    return np.minimum(held / sample_weight.sum(), 1.0)


def extract_rules(tree: FuzzyTree, feature_names, classes, alone: np.ndarray | None = None,
                  digits: int = 2) -> list[Rule]:
    """List every leaf of ``tree`` as a `Rule`, in node order.

    Parameters
    ----------
    tree : FuzzyTree
    feature_names : sequence of str, length n_features
    classes : ndarray of shape (n_classes,)
        Labels in the column order of ``tree.value``.
    alone : ndarray of shape (n_rules,) or None
        `fires_alone` shares of the leaves, None when unknown.
    digits : int >= 0
        Minimum decimals of thresholds in condition texts.
    """
    rules, cache = [], {}
    for k, node in enumerate(np.flatnonzero(tree.is_leaf)):
        value = tree.value[node]
        rules.append(Rule(
            rule_id=k, node=int(node),
            conditions=_path_conditions(tree, int(node), feature_names, digits, cache),
            distribution={_plain(c): float(v) for c, v in zip(classes, value, strict=True)},
            prediction=_plain(classes[int(np.argmax(value))]), support=float(tree.weight[node]),
            confidence=float(value.max()), alone=None if alone is None else float(alone[k]),
        ))
    return rules


#: What a rule's numbers mean (the legend of `format_summary` and of the Markdown table).
COLUMN_LEGEND = ("Confidence = the class's consequent mass, support = soft training weight, alone = "
                 "share of training samples on which the rule holds more than half the firing.")


def format_rules(rules: list[Rule], digits: int = 2, style: str = "text") -> str:
    """Render a rule list.

    Parameters
    ----------
    rules : list of Rule
    digits : int >= 0
        Decimals of probabilities, supports and shares.
    style : {"text", "markdown"}
        One `Rule.text` line per rule, or a Markdown table with the columns rule, IF, THEN,
        confidence, support, alone, distribution, followed by `COLUMN_LEGEND`.

    Raises
    ------
    ValueError
        Unknown style.
    """
    if style == "text":
        return "\n".join(rule.text(digits) for rule in rules)
    if style != "markdown":
        raise ValueError(f"unknown style {style!r}; expected 'text' or 'markdown'")
    lines = ["| rule | IF | THEN | confidence | support | alone | distribution |",
             "|---:|---|---|---:|---:|---:|---|"]
    for r in rules:
        alone = "n/a" if r.alone is None else f"{r.alone:.{digits}f}"
        cells = [str(v).replace("|", "\\|") for v in (r.premise(), r.prediction)]
        dist = r.distribution_text(digits).replace("|", "\\|")
        lines.append(f"| {r.rule_id} | {' | '.join(cells)} | {r.confidence:.{digits}f} | "
                     f"{r.support:.{digits}f} | {alone} | {dist} |")
    return "\n".join([*lines, "", COLUMN_LEGEND])


def format_summary(title: str, rules: list[Rule], digits: int = 2) -> str:
    """The short rule list that ``print(clf)`` shows: a header, then one `Rule.short` line per rule."""
    rule = "> " + "-" * 40
    head = [rule, f"> {title}: {len(rules)} rules",
            "> A rule's firing is evidence (mass) for its class distribution; the evidence of the rules",
            "> that fire is combined (paper section 3.2).",
            *textwrap.wrap(COLUMN_LEGEND, 94, initial_indent="> ", subsequent_indent="> "), rule]
    return "\n".join(head + [r.short(digits) for r in rules])


def _plain(value):
    """numpy scalar -> Python scalar (JSON-friendly)."""
    return value.item() if isinstance(value, np.generic) else value
