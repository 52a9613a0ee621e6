"""The interface every classification head over concept vectors implements (`ConceptHead`).

A head is fitted on concept probabilities in [0, 1] with class labels, reports its size (rules /
non-zero weights / distinct concepts used), describes itself in Markdown and saves without pickle
into a folder, as one version (:func:`ferl.io.persist.save_folder`): ``head.json`` (name, kind, concept
names, classes, size), the model's own files and ``rules.md``, replaced together.
"""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import numpy as np

from cbm.concepts.values import check_concept_values
from cbm.data.concept_tables import check_concept_names
from ferl.io.persist import atomic_write_text, save_folder

__all__ = ["HEAD_JSON", "RULES_MD", "SCHEMA_VERSION", "ConceptHead", "classes_from", "classes_meta"]

#: Version of the ``head.json`` layout.
SCHEMA_VERSION = 1
HEAD_JSON = "head.json"
#: The head's description with concept names (`ConceptHead.describe`), saved with it.
RULES_MD = "rules.md"


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
    #: Fitted on its training rows plus a copy with randomised interventions
    #: (`cbm.heads.interventions.training_rows`): a head whose read-out is not monotone in each concept.
    answered_fit: ClassVar[bool] = False

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
        """``{"rules": int | None, "nonzero_weights": int | None, "concepts_used": int}``; FERL heads
        add ``"evidence"``: ``"learned"`` or ``"tree"``, how their rules are read
        (`ferl.FERLClassifier`'s ``evidence_weights``)."""

    @abstractmethod
    def describe(self) -> str:
        """Markdown text of the model with concept names (rules, tree or weights)."""

    @abstractmethod
    def _save_model(self, path: Path) -> dict:
        """Write the model's files into folder ``path``; return extra ``head.json`` fields."""

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
        self : ConceptHead
            Fitted on these concepts and classes.

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
        return check_concept_values(X, self.concept_names_, f"concept vectors of head {self.name!r}")

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

    def save(self, path: str | os.PathLike, rules_note: str = "") -> Path:
        """Write the head into folder ``path`` (created) as one version: ``head.json``, the model's
        files (FERL and LR: ``model.json`` + ``model.npz``; CART: ``model.skops``) and ``rules.md``
        (``rules_note``, then `describe`).

        The previous head in ``path`` stays loadable until the new one is complete
        (:func:`ferl.io.persist.save_folder`; `load_head` follows ``path/current.json``); no pickle.

        Returns
        -------
        Path
            ``path``.
        """
        rules = rules_note + self.describe()
        base = {
            "schema_version": SCHEMA_VERSION, "head": self.name, "kind": self.kind, "seed": self.seed,
            "concept_names": self.concept_names_, "classes": [str(c) for c in self.classes_],
            "size": self.size(),
        }

        def write(folder: Path) -> None:
            doc = {**base, **self._save_model(folder)}
            atomic_write_text(folder / HEAD_JSON, json.dumps(doc, indent=1) + "\n")
            atomic_write_text(folder / RULES_MD, rules)

        return save_folder(path, write)


def classes_meta(classes: np.ndarray) -> dict:
    """JSON fields that restore ``classes`` exactly (values and dtype), see `classes_from`."""
    return {"classes": classes.tolist(), "classes_dtype": classes.dtype.str}


def classes_from(meta: dict) -> np.ndarray:
    """The class labels stored by `classes_meta`, ndarray of shape (C,) with their saved dtype."""
    return np.asarray(meta["classes"], dtype=np.dtype(meta["classes_dtype"]))
