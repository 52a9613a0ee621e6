"""Saving and loading a `FERLClassifier` as ``model.json`` + ``model.npz`` (no pickle).

The files are written and checksummed by `ferl.persist`; this module maps the estimator's fitted
state onto them and checks a loaded model before any inference (the numba kernels index the node
arrays without bounds checks, so a hand-edited file must fail here, not crash there).
"""

from __future__ import annotations

import os
from numbers import Integral
from pathlib import Path

import numpy as np

from ferl import persist
from ferl._tree import FuzzyTree

__all__ = ["save_classifier", "load_classifier"]


def save_classifier(est, path: str | os.PathLike) -> Path:
    """Write the fitted ``est`` to ``path/model.json`` + ``path/model.npz`` (atomic); returns ``path``."""
    arrays = {f"tree_{k}": getattr(est.tree_, k) for k in FuzzyTree.SAVED_FIELDS}
    arrays["feature_range"] = est.feature_range_
    if est.rule_alone_ is not None:
        arrays["rule_alone"] = est.rule_alone_
    if est.partitions_ is not None:
        arrays["partitions"] = est.partitions_
    classes = est.classes_
    meta = {
        "estimator": "FERLClassifier",
        "params": {k: v for k, v in est.get_params().items() if k != "random_state"},
        "random_state": est.random_state if isinstance(est.random_state, Integral) else None,
        "classes": classes.tolist(),
        "classes_dtype": classes.dtype.str if classes.dtype != object else "str",
        "feature_names": est.feature_names_,
        "feature_names_in": (
            [str(v) for v in est.feature_names_in_] if hasattr(est, "feature_names_in_") else None
        ),
        "n_features_in": int(est.n_features_in_),
        "n_classes": len(classes),
    }
    return persist.write_model(path, meta, arrays)


def load_classifier(cls, path: str | os.PathLike):
    """Rebuild a ``cls`` (FERLClassifier) saved by `save_classifier`.

    Raises
    ------
    FileNotFoundError
        Missing files.
    ValueError
        Another schema version, a corrupted or hand-edited file (the message names the problem).
    """
    meta, arrays = persist.read_model(path)
    if meta.get("estimator") != "FERLClassifier":
        raise ValueError(f"{path} does not hold a FERLClassifier")
    needed = ["params", "random_state", "classes", "classes_dtype", "feature_names",
              "feature_names_in", "n_features_in", "n_classes"]
    missing = [k for k in needed if k not in meta]
    if missing:
        raise ValueError(f"{path}: model.json lacks the fields {missing}")
    try:
        est = cls(**meta["params"], random_state=meta["random_state"])
        est._validate_params()
        est.classes_ = np.asarray(meta["classes"], dtype=None if meta["classes_dtype"] == "str"
                                  else np.dtype(meta["classes_dtype"]))
    except (TypeError, ValueError) as err:
        raise ValueError(f"{path}: invalid parameters or classes in model.json: {err}") from err
    est.n_features_in_ = meta["n_features_in"]
    if meta["feature_names_in"] is not None:
        est.feature_names_in_ = np.asarray(meta["feature_names_in"], dtype=object)
    est.feature_names_ = list(meta["feature_names"])
    est.feature_range_ = arrays.get("feature_range")
    est.partitions_ = arrays.get("partitions")
    tree = FuzzyTree(n_classes=meta["n_classes"])
    missing = [k for k in FuzzyTree.SAVED_FIELDS if f"tree_{k}" not in arrays]
    if missing:
        raise ValueError(f"{path} lacks the tree arrays {missing}; refit and save the model again")
    for k in FuzzyTree.SAVED_FIELDS:
        setattr(tree, k, arrays[f"tree_{k}"])
    _check_loaded(path, est, tree, meta, arrays)
    est.tree_ = tree
    est.n_rules_ = int(tree.is_leaf.sum())
    est.rule_alone_ = arrays.get("rule_alone")  # None in files saved before it was recorded
    return est


def _check_loaded(path, est, tree: FuzzyTree, meta: dict, arrays: dict) -> None:
    """ValueError naming the first inconsistency of a loaded model (hand-edited or corrupted files).

    The numba kernels index the node arrays without bounds checks, so the tree's structure is
    checked before any inference: children after their parent and inside the tree, features
    inside ``[0, n_features_in)``, shapes matching the node and class counts.
    """
    def fail(problem):
        raise ValueError(f"{path}: corrupted model ({problem}); refit and save the model again")

    d, n_classes = meta["n_features_in"], meta["n_classes"]
    if not isinstance(d, int) or isinstance(d, bool) or d < 1:
        fail(f"n_features_in is {d!r}")
    if not isinstance(n_classes, int) or isinstance(n_classes, bool) or n_classes != len(est.classes_) \
            or n_classes < 2 or est.classes_.ndim != 1:
        fail(f"n_classes {n_classes!r} does not match the {len(est.classes_)} classes")
    if len(est.feature_names_) != d or (meta["feature_names_in"] is not None
                                        and len(meta["feature_names_in"]) != d):
        fail(f"the feature names do not number n_features_in = {d}")
    fr = est.feature_range_
    if fr is None or fr.shape != (d, 2) or fr.dtype.kind != "f" or not np.isfinite(fr).all():
        fail("feature_range is missing or is not a finite (n_features_in, 2) array")
    if est.partitions_ is not None and (est.partitions_.shape[:1] != (d,) or est.partitions_.ndim != 3):
        fail("partitions do not match n_features_in")
    problem = tree.structure_problem(d)
    if problem:
        fail(problem)
    alone = arrays.get("rule_alone")
    if alone is not None and (alone.shape != (int(tree.is_leaf.sum()),)
                              or not ((alone >= 0) & (alone <= 1)).all()):
        fail("rule_alone is not one share in [0, 1] per rule")
