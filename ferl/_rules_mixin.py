"""`RulesMixin`: `FERLClassifier`'s rule interface (``rules_``, ``export_text``, ``print(clf)``,
``features_used_``) over `ferl.rules`, for an estimator fitted with ``tree_``, ``feature_names_``,
``classes_``, ``rule_alone_`` and ``evidence_weights_``."""

from __future__ import annotations

from numbers import Integral

import numpy as np
from sklearn.utils.validation import check_is_fitted

from ferl.rules import Rule, extract_rules, format_rules, format_summary

__all__ = ["RulesMixin"]


class RulesMixin:
    """The rules of a fitted fuzzy tree as `ferl.rules.Rule` objects and as text (beyond the paper,
    which prints no rules)."""

    @property
    def rules_(self) -> list[Rule]:
        """Every rule (leaf) as a `ferl.rules.Rule`: merged named conditions (thresholds with at
        least 2 decimals), consequent, support, confidence, alone share, id."""
        return self._rules(2)

    @property
    def features_used_(self) -> np.ndarray:
        """Sorted indices of the features the class read-out depends on, int64.

        The features of the tree's conditions and, with learned weights of evidence, each feature
        whose single-condition rule has a non-zero weight (`ferl.evidence.weights`): such a model
        reads every non-constant feature even when its tree has no split. The OOD scores read every
        feature.
        """
        check_is_fitted(self, "tree_")
        feature = self.tree_.feature
        used = np.unique(feature[feature >= 0]).astype(np.int64)
        weights = getattr(self, "evidence_weights_", None)
        if weights is None:
            return used
        weighted = np.flatnonzero(np.any(weights.coef[:, :self.n_features_in_] != 0, axis=0))
        return np.union1d(used, weighted).astype(np.int64)

    def _rules(self, digits: int) -> list[Rule]:
        check_is_fitted(self, "tree_")
        return extract_rules(self.tree_, self.feature_names_, self.classes_, self.rule_alone_, digits)

    def export_text(self, digits: int = 2, style: str = "text") -> str:
        """The rule list with the feature names and one merged condition per feature.

        Parameters
        ----------
        digits : int >= 0, default=2
            Decimals of probabilities, supports and shares, and minimum decimals of thresholds.
        style : {"text", "markdown"}, default="text"
            One ``rule <id>: IF ... THEN class [distribution] (confidence, support, alone)`` line per
            rule, or a Markdown table; see `ferl.rules` for how merged fuzzy conditions read.

        Returns
        -------
        str
            Stable for a fixed ``random_state``.

        Raises
        ------
        ValueError
            Unknown style or negative ``digits``.
        sklearn.exceptions.NotFittedError
            The model is not fitted.
        """
        if not isinstance(digits, Integral) or digits < 0:
            raise ValueError(f"digits must be a non-negative integer, got {digits!r}")
        return format_rules(self._rules(int(digits)), int(digits), style)

    def __str__(self) -> str:
        """``print(clf)``: the short rule list, as imodels' models print (a header, then ``rule <id>:
        IF ... THEN class (confidence, support, alone)`` per rule); ``repr(clf)`` stays
        scikit-learn's, and ``str`` is that repr while the model is not fitted."""
        if not hasattr(self, "tree_"):
            return repr(self)
        return format_summary(repr(self), self.rules_)
