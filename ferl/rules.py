"""Rules of a fitted fuzzy tree: one rule per leaf, as a conjunction of named fuzzy conditions."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ferl._partitions import SET_NAMES
from ferl._tree import SPLIT_FIXED, FuzzyTree

__all__ = ["Condition", "Rule", "extract_rules", "format_rules"]


@dataclass(frozen=True)
class Condition:
    """One fuzzy condition on a root-to-leaf path.

    Attributes
    ----------
    feature : int
        Column index.
    name : str
        Feature name.
    text : str
        Human-readable condition, e.g. ``"petal_width <= 0.42 ± 0.05"`` (learned split, threshold
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

    def text(self, digits: int = 2) -> str:
        """``IF a AND b THEN class (p=..., support=...)``."""
        premise = " AND ".join(c.text for c in self.conditions) or "TRUE"
        dist = ", ".join(f"{k}: {v:.{digits}f}" for k, v in self.distribution.items() if v > 0)
        return (f"rule {self.rule_id}: IF {premise} THEN {self.prediction} "
                f"[{dist}] (support {self.support:.{digits}f})")


def _condition_text(tree: FuzzyTree, node: int, left: bool, name: str, digits: int) -> str:
    if tree.kind[node] == SPLIT_FIXED:
        term = SET_NAMES[tree.fuzzy_set[node]]
        return f"{name} is {term}" if left else f"{name} is not {term}"
    op = "<=" if left else ">"
    return f"{name} {op} {tree.threshold[node]:.{digits}g} ± {tree.half_width[node]:.{digits}g}"


def extract_rules(tree: FuzzyTree, feature_names, classes, digits: int = 3) -> list[Rule]:
    """List every leaf of ``tree`` as a `Rule`, in node order.

    Parameters
    ----------
    tree : FuzzyTree
    feature_names : sequence of str, length n_features
    classes : ndarray of shape (n_classes,)
        Labels in the column order of ``tree.value``.
    digits : int
        Significant digits of thresholds in condition texts.
    """
    rules = []
    for node in np.flatnonzero(tree.is_leaf):
        conds = []
        child = int(node)
        while tree.parent[child] >= 0:
            parent = int(tree.parent[child])
            f = int(tree.feature[parent])
            left = tree.left[parent] == child
            conds.append(Condition(f, feature_names[f],
                                   _condition_text(tree, parent, left, feature_names[f], digits),
                                   parent))
            child = parent
        value = tree.value[node]
        rules.append(Rule(
            rule_id=len(rules), node=int(node), conditions=tuple(reversed(conds)),
            distribution={_plain(c): float(v) for c, v in zip(classes, value, strict=True)},
            prediction=_plain(classes[int(np.argmax(value))]), support=float(tree.weight[node]),
        ))
    return rules


def format_rules(rules: list[Rule], digits: int = 2) -> str:
    """Plain-text rule list, one rule per line."""
    return "\n".join(rule.text(digits) for rule in rules)


def _plain(value):
    """numpy scalar -> Python scalar (JSON-friendly)."""
    return value.item() if isinstance(value, np.generic) else value
