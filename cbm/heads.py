"""Classification heads over concept vectors (paper §5.2, Table 4): a registry by name.

=================  =====================================================================
name               model
=================  =====================================================================
``ferl-compact``   ``FERLClassifier(variant="compact")``
``ferl-medium``    ``FERLClassifier(variant="medium")``
``ferl-deep``      ``FERLClassifier(variant="deep")``
``cart``           ``DecisionTreeClassifier(random_state=seed)`` (scikit-learn defaults)
``lr``             ``LogisticRegression(max_iter=2000)`` (L2, C=1, multinomial)
``lr-restricted``  the same LR refitted on only ``n_concepts`` concepts (the paper's
                   "concept-restricted LR": as many concepts as the FERL-deep tree uses),
                   chosen by **weight magnitude** of the full LR: concept j is ranked by
                   ``std(x_j) * ||W[:, j]||_2`` over the training rows (ties: lower index).
=================  =====================================================================

Every head is fitted on concept probabilities in [0, 1] with class-name labels, reports its size
(rules / non-zero weights / distinct concepts used) and saves without pickle as ``head.json``
(name, kind, concept names, classes, size) + ``model.json`` / ``model.npz`` (FERL's own format;
for scikit-learn models the coefficients, or the tree's node arrays restored into a fresh
``sklearn.tree._tree.Tree`` through its ``__setstate__`` (a private scikit-learn interface, pinned
by the round-trip tests), so predictions after `load_head` are identical).
"""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import ClassVar

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.tree import DecisionTreeClassifier, export_text
from sklearn.tree._tree import NODE_DTYPE, Tree

from cbm.concepts_io import check_concept_names
from ferl import FERLClassifier
from ferl.persist import atomic_write_text, read_model, write_model

__all__ = [
    "HEADS",
    "SCHEMA_VERSION",
    "CARTHead",
    "ConceptHead",
    "FERLHead",
    "LRHead",
    "RestrictedLRHead",
    "load_head",
    "make_head",
]

#: Version of the ``head.json`` layout.
SCHEMA_VERSION = 1
HEAD_JSON = "head.json"


class ConceptHead(ABC):
    """A classifier over concept vectors with concept names, a size report and persistence.

    Attributes (after `fit` / `load_head`)
    --------------------------------------
    name : str
        Registry name, e.g. ``"ferl-deep"``.
    concept_names_ : list of str
        The k input concepts, in column order.
    classes_ : ndarray of shape (C,)
        Class labels seen in fit, the column order of `predict_proba`.
    model_ : estimator
        The fitted FERL / scikit-learn model.
    """

    kind: ClassVar[str]

    def __init__(self, name: str, seed: int = 0) -> None:
        self.name = name
        self.seed = seed

    # ------------------------------------------------------------------ to implement
    @abstractmethod
    def _fit(self, X: np.ndarray, y: np.ndarray) -> None:
        """Fit ``self.model_`` on validated X (n, k) float64 and labels y (n,)."""

    def _model_inputs(self, X: np.ndarray) -> np.ndarray:
        """The columns of X the model reads (all of them unless overridden)."""
        return X

    def concepts_used(self) -> np.ndarray:
        """Sorted indices (into ``concept_names_``) of the concepts the fitted model reads.

        This default serves the tree heads (FERL, CART): the features of the split nodes.
        """
        feature = self.model_.tree_.feature
        return np.unique(feature[feature >= 0])

    @abstractmethod
    def size(self) -> dict:
        """``{"rules": int | None, "nonzero_weights": int | None, "concepts_used": int}``."""

    @abstractmethod
    def describe(self) -> str:
        """Markdown text of the model with concept names (rules, tree or weights)."""

    @abstractmethod
    def _save_model(self, path: Path) -> dict:
        """Write ``model.json`` + ``model.npz`` into ``path``; return extra ``head.json`` fields."""

    @abstractmethod
    def _load_model(self, path: Path, doc: dict) -> None:
        """Restore ``self.model_`` from what `_save_model` wrote."""

    # ------------------------------------------------------------------ shared behaviour
    def fit(self, X: np.ndarray, y: np.ndarray, concept_names: Sequence[str]) -> ConceptHead:
        """Fit on concept vectors.

        Parameters
        ----------
        X : ndarray of shape (n, k), float in [0, 1]
            Raw or calibrated concept probabilities.
        y : ndarray of shape (n,)
            Class labels (names or integers); at least two distinct classes.
        concept_names : sequence of str of length k

        Returns
        -------
        self

        Raises
        ------
        ValueError
            Wrong shapes, NaN or values outside [0, 1] (row and concept named), fewer than two classes.
        """
        self.concept_names_ = [str(n) for n in concept_names]
        X = self._check_X(X)
        y = np.asarray(y)
        if y.shape != (X.shape[0],):
            raise ValueError(f"y has shape {y.shape}, expected ({X.shape[0]},)")
        if np.unique(y).size < 2:
            raise ValueError(f"head {self.name!r} needs at least two classes in y")
        self._fit(X, y)
        return self

    @property
    def classes_(self) -> np.ndarray:
        return self.model_.classes_

    def _check_X(self, X: np.ndarray, concept_names: Sequence[str] | None = None) -> np.ndarray:
        if not hasattr(self, "concept_names_"):
            raise ValueError(f"head {self.name!r} is not fitted")
        if concept_names is not None:
            check_concept_names(concept_names, self.concept_names_, source="the concept vectors",
                                reference=f"head {self.name!r}")
        X = np.asarray(X)
        k = len(self.concept_names_)
        if X.ndim != 2 or X.shape[1] != k or X.shape[0] == 0:
            raise ValueError(f"head {self.name!r} expects concept vectors of shape (n, {k}), got {X.shape}")
        X = X.astype(np.float64)
        bad = ~np.isfinite(X) | (X < 0) | (X > 1)
        if bad.any():
            r, c = (int(v) for v in np.argwhere(bad)[0])
            raise ValueError(f"concept vectors row {r}, concept {self.concept_names_[c]!r} is {X[r, c]} "
                             "(must be finite in [0, 1])")
        return X

    def predict_proba(self, X: np.ndarray, concept_names: Sequence[str] | None = None) -> np.ndarray:
        """Class probabilities, ndarray of shape (n, C) in the order of ``classes_``.

        ``concept_names``, when given, must equal ``concept_names_`` (else ValueError).
        For FERL heads this is the pignistic probability.
        """
        return self.model_.predict_proba(self._model_inputs(self._check_X(X, concept_names)))

    def predict(self, X: np.ndarray, concept_names: Sequence[str] | None = None) -> np.ndarray:
        """Labels ``classes_[argmax predict_proba]`` (first class on ties), shape (n,)."""
        return self.classes_[np.argmax(self.predict_proba(X, concept_names), axis=1)]

    def class_index(self, y: np.ndarray) -> np.ndarray:
        """Column index of each label in ``classes_``, int64 of shape (n,).

        Raises
        ------
        ValueError
            A label the head never saw in fit (the unseen labels are listed).
        """
        classes = self.classes_
        lookup = {c: i for i, c in enumerate(classes.tolist())}
        idx = np.array([lookup.get(v, -1) for v in np.asarray(y).tolist()], dtype=np.int64)
        unseen = idx < 0
        if unseen.any():
            missing = sorted({str(v) for v in np.asarray(y)[unseen]})
            raise ValueError(
                f"head {self.name!r} is evaluated on {int(unseen.sum())} row(s) of class(es) it never "
                f"saw in fit: {missing[:20]}; it knows {len(classes)} classes"
            )
        return idx

    def save(self, path: str | os.PathLike) -> Path:
        """Write the head into folder ``path`` (created): ``head.json``, ``model.json``, ``model.npz``.

        Every file is written atomically; no pickle.
        """
        path = Path(path)
        extra = self._save_model(path)
        doc = {
            "schema_version": SCHEMA_VERSION, "head": self.name, "kind": self.kind, "seed": self.seed,
            "concept_names": self.concept_names_, "classes": [str(c) for c in self.classes_],
            "size": self.size(), **extra,
        }
        atomic_write_text(path / HEAD_JSON, json.dumps(doc, indent=1) + "\n")
        return path


def _classes_meta(classes: np.ndarray) -> dict:
    return {"classes": classes.tolist(), "classes_dtype": classes.dtype.str}


def _classes_from(meta: dict) -> np.ndarray:
    return np.asarray(meta["classes"], dtype=np.dtype(meta["classes_dtype"]))


class FERLHead(ConceptHead):
    """FERL rule tree head; ``variant`` is ``"compact"``, ``"medium"`` or ``"deep"``."""

    kind = "ferl"

    def __init__(self, name: str, seed: int = 0, variant: str = "deep") -> None:
        super().__init__(name, seed)
        self.variant = variant

    def _fit(self, X, y):
        self.model_ = FERLClassifier(variant=self.variant, random_state=self.seed)
        self.model_.fit(X, y, feature_names=self.concept_names_)

    def predict_set(self, X: np.ndarray, concept_names: Sequence[str] | None = None) -> np.ndarray:
        """Interval-dominance credal sets, bool ndarray of shape (n, C); all True = abstention."""
        return self.model_.predict_set(self._check_X(X, concept_names))

    def size(self):
        return {"rules": int(self.model_.n_rules_), "nonzero_weights": None,
                "concepts_used": int(self.concepts_used().size)}

    def describe(self):
        return (f"# {self.name}: {self.model_.n_rules_} rules over {self.concepts_used().size} concepts\n\n"
                "```\n" + self.model_.export_text() + "\n```\n")

    def _save_model(self, path):
        self.model_.save(path)
        return {"variant": self.variant}

    def _load_model(self, path, doc):
        self.variant = doc["variant"]
        self.model_ = FERLClassifier.load(path)


class CARTHead(ConceptHead):
    """CART (scikit-learn ``DecisionTreeClassifier`` with its defaults, seeded)."""

    kind = "cart"

    def _fit(self, X, y):
        self.model_ = DecisionTreeClassifier(random_state=self.seed).fit(X, y)

    def size(self):
        return {"rules": int(self.model_.get_n_leaves()), "nonzero_weights": None,
                "concepts_used": int(self.concepts_used().size)}

    def describe(self):
        text = export_text(self.model_, feature_names=self.concept_names_, class_names=None)
        return (f"# {self.name}: {self.model_.get_n_leaves()} leaves over {self.concepts_used().size} "
                f"concepts\n\n```\n{text}```\n")

    def _save_model(self, path):
        est = self.model_
        state = est.tree_.__getstate__()
        arrays = {f"node_{f}": state["nodes"][f] for f in NODE_DTYPE.names}
        arrays["values"] = state["values"]
        meta = {"estimator": "DecisionTreeClassifier", "params": est.get_params(),
                "max_depth": int(state["max_depth"]), "n_features": int(est.n_features_in_),
                **_classes_meta(est.classes_)}
        write_model(path, meta, arrays)
        return {}

    def _load_model(self, path, doc):
        meta, arrays = read_model(path)
        classes = _classes_from(meta)
        nodes = np.zeros(arrays["values"].shape[0], dtype=NODE_DTYPE)
        for f in NODE_DTYPE.names:
            nodes[f] = arrays[f"node_{f}"]
        tree = Tree(meta["n_features"], np.array([classes.size], dtype=np.intp), 1)
        tree.__setstate__({"max_depth": meta["max_depth"], "node_count": nodes.size, "nodes": nodes,
                           "values": arrays["values"]})
        est = DecisionTreeClassifier(**meta["params"])
        est.tree_, est.classes_, est.n_classes_ = tree, classes, classes.size
        est.n_outputs_, est.n_features_in_, est.max_features_ = 1, meta["n_features"], meta["n_features"]
        self.model_ = est


class LRHead(ConceptHead):
    """Multinomial logistic regression over all concepts (``LogisticRegression(max_iter=2000)``)."""

    kind = "lr"

    def _fit(self, X, y):
        self.model_ = LogisticRegression(max_iter=2000).fit(X, y)

    def _weights(self) -> np.ndarray:
        """Coefficients over all k concepts, shape (n_rows, k) (1 row for two classes)."""
        return self.model_.coef_

    def concepts_used(self):
        return np.flatnonzero(np.any(self._weights() != 0, axis=0))

    def size(self):
        return {"rules": None, "nonzero_weights": int(np.count_nonzero(self.model_.coef_)),
                "concepts_used": int(self.concepts_used().size)}

    def describe(self, top: int = 10) -> str:
        W = self._weights()
        lines = [f"# {self.name}: {np.count_nonzero(self.model_.coef_)} non-zero weights over "
                 f"{self.concepts_used().size} concepts", "",
                 f"Largest {top} weights (by |w|) per class:", ""]
        rows = self.classes_ if W.shape[0] > 1 else self.classes_[1:]
        for c, w in zip(rows, W, strict=True):
            order = np.argsort(-np.abs(w), kind="stable")[:top]
            lines.append(f"- **{c}**: " + ", ".join(f"{self.concept_names_[j]} {w[j]:+.2f}" for j in order))
        return "\n".join(lines) + "\n"

    def _save_model(self, path):
        est = self.model_
        meta = {"estimator": "LogisticRegression", "params": est.get_params(),
                "n_features": int(est.n_features_in_), **_classes_meta(est.classes_)}
        write_model(path, meta, {"coef": est.coef_, "intercept": est.intercept_, "n_iter": est.n_iter_})
        return {}

    def _load_model(self, path, doc):
        meta, arrays = read_model(path)
        est = LogisticRegression(**meta["params"])
        est.coef_, est.intercept_, est.n_iter_ = arrays["coef"], arrays["intercept"], arrays["n_iter"]
        est.classes_, est.n_features_in_ = _classes_from(meta), meta["n_features"]
        self.model_ = est


class RestrictedLRHead(LRHead):
    """LR refitted on the ``n_concepts`` concepts with the largest full-LR weight magnitude.

    The rank of concept j is ``std(x_j) * ||W[:, j]||_2`` with W the full LR's coefficients on the
    same training rows (ties broken by the lower index). ``n_concepts`` is set by the caller,
    e.g. to the FERL-deep tree's ``size()["concepts_used"]`` (paper Table 4); it is capped at k.
    """

    kind = "lr-restricted"

    def __init__(self, name: str, seed: int = 0, n_concepts: int | None = None) -> None:
        super().__init__(name, seed)
        self.n_concepts = n_concepts

    def _fit(self, X, y):
        if self.n_concepts is None or self.n_concepts < 1:
            raise ValueError(f"head {self.name!r} needs n_concepts >= 1 (the FERL-deep concept count), "
                             f"got {self.n_concepts}")
        full = LogisticRegression(max_iter=2000).fit(X, y)
        score = X.std(axis=0) * np.linalg.norm(full.coef_, axis=0)
        keep = min(int(self.n_concepts), X.shape[1])
        self.selected_ = np.sort(np.argsort(-score, kind="stable")[:keep])
        self.model_ = LogisticRegression(max_iter=2000).fit(X[:, self.selected_], y)

    def _model_inputs(self, X):
        return X[:, self.selected_]

    def _weights(self):
        W = np.zeros((self.model_.coef_.shape[0], len(self.concept_names_)))
        W[:, self.selected_] = self.model_.coef_
        return W

    def describe(self, top: int = 10) -> str:
        chosen = ", ".join(self.concept_names_[j] for j in self.selected_)
        return (super().describe(top) + f"\nConcepts kept ({self.selected_.size}, by |full-LR weight| x "
                f"std): {chosen}\n")

    def _save_model(self, path):
        super()._save_model(path)
        return {"n_concepts": self.n_concepts, "selected": self.selected_.tolist()}

    def _load_model(self, path, doc):
        super()._load_model(path, doc)
        self.n_concepts = doc["n_concepts"]
        self.selected_ = np.asarray(doc["selected"], dtype=np.int64)


#: Registry: head name -> factory ``(seed, **options) -> ConceptHead``.
HEADS: dict[str, Callable[..., ConceptHead]] = {
    "ferl-compact": lambda seed=0: FERLHead("ferl-compact", seed, "compact"),
    "ferl-medium": lambda seed=0: FERLHead("ferl-medium", seed, "medium"),
    "ferl-deep": lambda seed=0: FERLHead("ferl-deep", seed, "deep"),
    "cart": lambda seed=0: CARTHead("cart", seed),
    "lr": lambda seed=0: LRHead("lr", seed),
    "lr-restricted": lambda seed=0, n_concepts=None: RestrictedLRHead("lr-restricted", seed, n_concepts),
}


def make_head(name: str, seed: int = 0, **options) -> ConceptHead:
    """A new, unfitted head from the registry `HEADS`.

    Raises
    ------
    ValueError
        Unknown name (the known names are listed).
    """
    if name not in HEADS:
        raise ValueError(f"unknown head {name!r}; known heads: {list(HEADS)}")
    return HEADS[name](seed=seed, **options)


def load_head(path: str | os.PathLike) -> ConceptHead:
    """Load a head saved by `ConceptHead.save`; predictions equal the saved head's.

    Raises
    ------
    FileNotFoundError
        ``head.json`` or the model files are missing.
    ValueError
        Another schema version, or a head name / kind that the registry does not know.
    """
    path = Path(path)
    if not (path / HEAD_JSON).is_file():
        raise FileNotFoundError(f"{path / HEAD_JSON} not found (not a saved head)")
    try:
        doc = json.loads((path / HEAD_JSON).read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path / HEAD_JSON} is not valid JSON: {err}") from err
    if not isinstance(doc, dict):
        raise ValueError(f"{path / HEAD_JSON} does not hold a JSON object (a saved head's description)")
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"{path / HEAD_JSON}: schema version {doc.get('schema_version')!r}, expected "
                         f"{SCHEMA_VERSION}")
    missing = [k for k in ("head", "kind", "seed", "concept_names") if k not in doc]
    if missing:
        raise ValueError(f"{path / HEAD_JSON} lacks the fields {missing}")
    head = make_head(doc["head"], doc["seed"])
    if head.kind != doc["kind"]:
        raise ValueError(f"{path / HEAD_JSON}: head {doc['head']!r} is not of kind {doc['kind']!r}")
    head.concept_names_ = list(doc["concept_names"])
    head._load_model(path, doc)
    return head
