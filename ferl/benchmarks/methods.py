"""Registry of the classifiers compared on the tabular benchmark (paper §4.2, Table 1).

Every entry builds a :class:`Method`: a thin adapter with one interface for scikit-learn
estimators, FERL and conformal wrappers. Labels are the encoded ``0..C-1`` of
:mod:`ferl.benchmarks.keel`; probabilities always have ``C`` columns in that order.
"""

from __future__ import annotations

import difflib
import importlib
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from sklearn.base import ClassifierMixin, clone
from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.neural_network import MLPClassifier
from sklearn.tree import DecisionTreeClassifier

from ferl.evidence.conformal import SplitConformal

__all__ = [
    "METHODS",
    "Method",
    "MethodSpec",
    "available_methods",
    "ferl_available",
    "ferl_evidence_param",
    "make_method",
]


def ferl_available() -> bool:
    """Whether ``from ferl import FERLClassifier`` works (the learner has landed)."""
    try:
        from ferl import FERLClassifier  # noqa: F401
    except ImportError:
        return False
    return True


def ferl_evidence_param(clf: ClassifierMixin) -> str:
    """Name of the evidence-source parameter of ``clf``, a FERLClassifier: ``evidence_nodes``, or
    ``evidence`` as drafted.

    Raises
    ------
    ValueError
        The estimator has neither parameter.
    """
    params = clf.get_params()
    for name in ("evidence_nodes", "evidence"):
        if name in params:
            return name
    raise ValueError("FERLClassifier exposes no evidence-source parameter")


def _full_columns(proba: np.ndarray, classes: np.ndarray, n_classes: int) -> np.ndarray:
    """Columns of ``proba`` or sets (ordered as ``classes``) placed in a (n, n_classes) matrix."""
    if proba.shape[1] == n_classes and np.array_equal(classes, np.arange(n_classes)):
        return proba
    full = np.zeros((proba.shape[0], n_classes))
    full[:, np.asarray(classes, dtype=np.int64)] = proba
    return full


class Method:
    """A fitted-or-not benchmark method wrapping one scikit-learn-style estimator.

    Parameters
    ----------
    estimator : classifier
        Unfitted estimator with ``fit``/``predict_proba`` (cloned on every fit).
    size : callable, optional
        ``size(fitted_estimator) -> float``: leaves or rules; ``nan`` when not applicable.
    native_sets : bool, default=False
        Use the estimator's own ``predict_set`` (FERL's credal sets).
    conformal_alpha : float, optional
        Wrap the estimator's probabilities in APS split conformal at this level, calibrated on
        the calibration part passed to :meth:`fit`.
    """

    def __init__(
        self,
        estimator: ClassifierMixin,
        size: Callable[[ClassifierMixin], float] | None = None,
        native_sets: bool = False,
        conformal_alpha: float | None = None,
    ) -> None:
        self.estimator = estimator
        self._size = size
        self.native_sets = native_sets
        self.conformal_alpha = conformal_alpha

    def fit(
        self, X: np.ndarray, y: np.ndarray, X_cal: np.ndarray, y_cal: np.ndarray, n_classes: int
    ) -> Method:
        """Fit on ``(X, y)``; calibrate conformal sets on ``(X_cal, y_cal)`` when configured.

        Parameters
        ----------
        X, X_cal : ndarray of shape (n, d) and (n_cal, d), float
        y, y_cal : ndarray of shape (n,) and (n_cal,), int in [0, n_classes)
        n_classes : int

        Returns
        -------
        self
        """
        self.n_classes_ = n_classes
        self.fitted_ = clone(self.estimator)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            self.fitted_.fit(X, y)
        if self.conformal_alpha is not None:
            self.conformal_ = SplitConformal(self.conformal_alpha, "aps")
            self.conformal_.fit(self.predict_proba(X_cal), y_cal)
        return self

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """Class probabilities, ndarray of shape (n, n_classes)."""
        proba = self.fitted_.predict_proba(X)
        return _full_columns(proba, self.fitted_.classes_, self.n_classes_)

    def predict_set(self, X: np.ndarray, proba: np.ndarray | None = None) -> np.ndarray | None:
        """Prediction sets, bool ndarray of shape (n, n_classes), or ``None`` for point methods.

        ``proba`` (the output of :meth:`predict_proba` on ``X``) saves a second pass.
        """
        if self.native_sets:
            sets = np.asarray(self.fitted_.predict_set(X), dtype=bool)
            return _full_columns(sets, self.fitted_.classes_, self.n_classes_).astype(bool)
        if self.conformal_alpha is not None:
            return self.conformal_.predict_set(self.predict_proba(X) if proba is None else proba)
        return None

    def size(self) -> float:
        """Model size (leaves / rules) of the fitted estimator, ``nan`` when not applicable."""
        return float(self._size(self.fitted_)) if self._size is not None else float("nan")


@dataclass(frozen=True)
class MethodSpec:
    """A registry entry.

    Attributes
    ----------
    name : str
        Registry key, e.g. ``"ferl-deep"``.
    label : str
        Name printed in tables (the paper's).
    build : callable
        ``build(seed) -> Method``.
    interpretable : bool
        Counted among the interpretable methods (paper Table 1 marks).
    requires : str or None
        ``"ferl"`` or an importable module name that must be present.
    """

    name: str
    label: str
    build: Callable[[int], Method]
    interpretable: bool
    requires: str | None = None


def _tree_leaves(est: DecisionTreeClassifier) -> float:
    return float(est.get_n_leaves())


def _forest_leaves(est: RandomForestClassifier) -> float:
    return float(sum(tree.get_n_leaves() for tree in est.estimators_))


def _ferl(variant: str) -> Callable[[int], Method]:
    def build(seed: int) -> Method:
        from ferl import FERLClassifier

        return Method(
            FERLClassifier(variant=variant, random_state=seed),
            size=lambda est: est.n_rules_,
            native_sets=True,
        )

    return build


def _figs(seed: int) -> Method:
    from imodels import FIGSClassifier

    return Method(FIGSClassifier(random_state=seed), size=lambda est: est.complexity_)


METHODS: dict[str, MethodSpec] = {
    spec.name: spec
    for spec in [
        MethodSpec("ferl-compact", "FERL-compact", _ferl("compact"), True, "ferl"),
        MethodSpec("ferl-medium", "FERL-medium", _ferl("medium"), True, "ferl"),
        MethodSpec("ferl-deep", "FERL-deep", _ferl("deep"), True, "ferl"),
        MethodSpec(
            "cart",
            "CART",
            lambda seed: Method(DecisionTreeClassifier(random_state=seed), _tree_leaves),
            True,
        ),
        MethodSpec(
            "c45",
            "C4.5-like",
            lambda seed: Method(
                DecisionTreeClassifier(criterion="entropy", random_state=seed), _tree_leaves
            ),
            True,
        ),
        MethodSpec("figs", "FIGS", _figs, True, "imodels"),
        MethodSpec("lr", "LR", lambda seed: Method(LogisticRegression(max_iter=2000)), True),
        MethodSpec(
            "rf",
            "RF",
            lambda seed: Method(
                RandomForestClassifier(n_estimators=100, random_state=seed, n_jobs=1),
                _forest_leaves,
            ),
            False,
        ),
        MethodSpec(
            "hgb",
            "GB (HistGB)",
            lambda seed: Method(HistGradientBoostingClassifier(random_state=seed)),
            False,
        ),
        MethodSpec(
            "mlp-conformal",
            "MLP-Conformal",
            lambda seed: Method(
                MLPClassifier(hidden_layer_sizes=(64,), max_iter=300, random_state=seed),
                conformal_alpha=0.1,
            ),
            False,
        ),
    ]
}


def _requirement_met(requires: str | None) -> bool:
    if requires is None:
        return True
    if requires == "ferl":
        return ferl_available()
    try:
        importlib.import_module(requires)
    except Exception:  # noqa: BLE001 - a broken optional install counts as absent
        return False
    return True


def available_methods(names: list[str] | None = None) -> tuple[list[str], dict[str, str]]:
    """Methods that can run here.

    Parameters
    ----------
    names : list of str, optional
        Requested registry keys; ``None`` means every entry.

    Returns
    -------
    available : list of str
        Requested names whose requirement is met, in registry order.
    skipped : dict of str to str
        Name -> reason for each requested method that cannot run.

    Raises
    ------
    ValueError
        An unknown name (the message lists close matches).
    """
    requested = list(METHODS) if names is None else names
    for name in requested:
        if name not in METHODS:
            close = difflib.get_close_matches(name, METHODS, n=3)
            raise ValueError(f"unknown method {name!r}; close matches: {close or list(METHODS)}")
    available, skipped = [], {}
    for name in METHODS:
        if name not in requested:
            continue
        requires = METHODS[name].requires
        if _requirement_met(requires):
            available.append(name)
        else:
            skipped[name] = f"{requires} is not importable"
    return available, skipped


def make_method(name: str, seed: int) -> Method:
    """Build the unfitted :class:`Method` registered under ``name``.

    Raises
    ------
    ValueError
        Unknown name.
    """
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; known: {list(METHODS)}")
    return METHODS[name].build(seed)
