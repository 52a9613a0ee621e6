"""Rules of a fitted fuzzy tree: one rule per leaf, as a conjunction of named fuzzy conditions.

A learned split reads ``name ≤ theta ± h`` (left, "x_f <= theta" with the ramp's half-width ``h`` as
its band, paper eq. 1) or ``name > theta ± h`` (right); a fixed partition reads with its linguistic
term, ``name is high`` / ``name is not high`` (compact variant). Thresholds are printed with at least
``digits`` decimals and enough decimals to show the band's first significant digit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ferl._partitions import SET_NAMES
from ferl._tree import SPLIT_FIXED, FuzzyTree

__all__ = ["Condition", "Rule", "node_conditions", "extract_rules", "format_rules"]


@dataclass(frozen=True)
class Condition:
    """One fuzzy condition on a root-to-node path.

    Attributes
    ----------
    feature : int
        Column index.
    name : str
        Feature name.
    text : str
        Human-readable condition, e.g. ``"bill_length ≤ 0.42 ± 0.05"`` (learned split: threshold
        with its band h) or ``"wing_color::blue is high"`` (fixed partition).
    node : int
        Internal node that tests it.
    """

    feature: int
    name: str
    text: str
    node: int


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
    distribution : dict of class label -> float
        Consequent p_o (sums to 1).
    prediction : object
        Class with the largest consequent probability.
    support : float
        Soft support: the sum of training firing x sample weight.
    """

    rule_id: int
    node: int
    conditions: tuple
    distribution: dict
    prediction: object
    support: float

    def premise(self) -> str:
        """The conditions joined by ``AND`` (``TRUE`` for a root-only tree)."""
        return " AND ".join(c.text for c in self.conditions) or "TRUE"

    def text(self, digits: int = 2) -> str:
        """``rule <id>: IF a AND b THEN class [class: p, ...] (support s)``."""
        dist = ", ".join(f"{k}: {v:.{digits}f}" for k, v in self.distribution.items() if v > 0)
        return (f"rule {self.rule_id}: IF {self.premise()} THEN {self.prediction} "
                f"[{dist}] (support {self.support:.{digits}f})")

    def to_dict(self) -> dict:
        """JSON-friendly dict: rule_id, node, conditions (texts), features, distribution (list of
        ``{"class", "p"}``), prediction, support."""
        return {
            "rule_id": self.rule_id, "node": self.node,
            "conditions": [c.text for c in self.conditions],
            "features": [c.name for c in self.conditions],
            "distribution": [{"class": k, "p": v} for k, v in self.distribution.items()],
            "prediction": self.prediction, "support": self.support,
        }


def _decimals(half_width: float, digits: int) -> int:
    if not np.isfinite(half_width) or half_width <= 0:
        return digits
    return max(digits, -math.floor(math.log10(half_width)))


def _condition_text(tree: FuzzyTree, node: int, left: bool, name: str, digits: int) -> str:
    if tree.kind[node] == SPLIT_FIXED:
        term = SET_NAMES[tree.fuzzy_set[node]]
        return f"{name} is {term}" if left else f"{name} is not {term}"
    op = "≤" if left else ">"
    h = float(tree.half_width[node])
    dec = _decimals(h, digits)
    return f"{name} {op} {tree.threshold[node]:.{dec}f} ± {h:.{dec}f}"


def node_conditions(tree: FuzzyTree, node: int, feature_names, digits: int = 2) -> tuple:
    """Conditions on the root-to-``node`` path, root first.

    Parameters
    ----------
    tree : FuzzyTree
    node : int
    feature_names : sequence of str, length n_features
    digits : int
        Minimum decimals of thresholds.

    Returns
    -------
    tuple of Condition
    """
    conds = []
    child = int(node)
    while tree.parent[child] >= 0:
        parent = int(tree.parent[child])
        f = int(tree.feature[parent])
        left = tree.left[parent] == child
        conds.append(Condition(f, feature_names[f],
                               _condition_text(tree, parent, left, feature_names[f], digits), parent))
        child = parent
    return tuple(reversed(conds))


def extract_rules(tree: FuzzyTree, feature_names, classes, digits: int = 2) -> list[Rule]:
    """List every leaf of ``tree`` as a `Rule`, in node order.

    Parameters
    ----------
    tree : FuzzyTree
    feature_names : sequence of str, length n_features
    classes : ndarray of shape (n_classes,)
        Labels in the column order of ``tree.value``.
    digits : int
        Minimum decimals of thresholds in condition texts.
    """
    rules = []
    for node in np.flatnonzero(tree.is_leaf):
        value = tree.value[node]
        rules.append(Rule(
            rule_id=len(rules), node=int(node),
            conditions=node_conditions(tree, int(node), feature_names, digits),
            distribution={_plain(c): float(v) for c, v in zip(classes, value, strict=True)},
            prediction=_plain(classes[int(np.argmax(value))]), support=float(tree.weight[node]),
        ))
    return rules


def format_rules(rules: list[Rule], digits: int = 2, style: str = "text") -> str:
    """Render a rule list.

    Parameters
    ----------
    rules : list of Rule
    digits : int
        Decimals of probabilities and supports.
    style : {"text", "markdown"}
        One ``rule <id>: IF ... THEN ...`` line per rule, or a Markdown table with the columns
        rule, IF, THEN, distribution, support.

    Raises
    ------
    ValueError
        Unknown style.
    """
    if style == "text":
        return "\n".join(rule.text(digits) for rule in rules)
    if style != "markdown":
        raise ValueError(f"unknown style {style!r}; expected 'text' or 'markdown'")
    lines = ["| rule | IF | THEN | distribution | support |", "|---:|---|---|---|---:|"]
    for r in rules:
        dist = ", ".join(f"{k}: {v:.{digits}f}" for k, v in r.distribution.items() if v > 0)
        cells = [str(v).replace("|", "\\|") for v in (r.premise(), r.prediction, dist)]
        lines.append(f"| {r.rule_id} | {' | '.join(cells)} | {r.support:.{digits}f} |")
    return "\n".join(lines)


def _plain(value):
    """numpy scalar -> Python scalar (JSON-friendly)."""
    return value.item() if isinstance(value, np.generic) else value
