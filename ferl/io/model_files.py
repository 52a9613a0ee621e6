"""Saving and loading a `FERLClassifier` as ``model.json`` + ``model.npz`` (no pickle).

The files are written, versioned and checksummed by `ferl.io.persist` (a save replaces the whole
model or nothing); this module maps the estimator's fitted state onto them and checks a loaded
model before any inference (the numba kernels index the node arrays without bounds checks, and
the novelty scores divide by the saved variances, so a hand-edited file must fail here, not
crash or return NaN there). Arrays the checks do not know are loaded and ignored, so a later
version may save more. `ModelFilesMixin` gives `FERLClassifier` its ``save`` and ``load``.
"""

from __future__ import annotations

import os
import warnings
from numbers import Integral
from pathlib import Path
from typing import Self

import numpy as np
from sklearn.utils.validation import check_is_fitted

from ferl._params import check_params
from ferl.evidence.weights import EvidenceWeights
from ferl.io import persist
from ferl.novelty.leaf_gaussians import RIDGE, LeafGaussians
from ferl.novelty.ood_score import spread_ok
from ferl.novelty.prototypes import RulePrototypes
from ferl.presets import PARAMETER_CONSTRAINTS
from ferl.tree.fuzzy_tree import FuzzyTree

__all__ = ["ModelFilesMixin", "save_classifier", "load_classifier"]


def save_classifier(est, path: str | os.PathLike) -> Path:
    """Write the fitted ``est`` as ``model.json`` + ``model.npz`` into a new version of folder ``path``
    (`ferl.io.persist.write_model`: the previous model stays loadable until this one is complete);
    returns ``path``."""
    arrays = {f"tree_{k}": getattr(est.tree_, k) for k in FuzzyTree.SAVED_FIELDS}
    arrays["feature_range"] = est.feature_range_
    arrays.update(_leaf_arrays(est.leaf_gaussians_))
    arrays.update({f"prototype_{k}": getattr(est.rule_prototypes_, k) for k in RulePrototypes.SAVED_FIELDS})
    if est.rule_alone_ is not None:
        arrays["rule_alone"] = est.rule_alone_
    if getattr(est, "set_scores_", None) is not None:
        arrays["set_scores"] = est.set_scores_
    if getattr(est, "discount_point_", None) is not None:
        arrays["discount_point"] = est.discount_point_
    if getattr(est, "novelty_reference_", None) is not None:
        arrays["novelty_reference"] = est.novelty_reference_
    if getattr(est, "evidence_weights_", None) is not None:
        weights = est.evidence_weights_
        arrays.update({f"weights_{k}": getattr(weights, k) for k in EvidenceWeights.SAVED_FIELDS})
    if est.partitions_ is not None:
        arrays["partitions"] = est.partitions_
    classes = est.classes_
    if not isinstance(est.random_state, Integral | None):
        warnings.warn(f"random_state {est.random_state!r} is not an int seed: the saved model records None "
                      "(a refit of the loaded model draws other bootstraps); pass an int to save a seed",
                      UserWarning, stacklevel=3)
    meta = {
        "estimator": "FERLClassifier",
        # numpy scalars (``np.True_`` passes the bool check, an ``np.int64`` seed) as plain JSON
        "params": {k: v.item() if isinstance(v, np.generic) else v
                   for k, v in est.get_params().items() if k != "random_state"},
        "random_state": int(est.random_state) if isinstance(est.random_state, Integral) else None,
        # dates and durations as their integer counts of the dtype's unit (JSON has no date)
        "classes": (classes.view(np.int64) if classes.dtype.kind in "mM" else classes).tolist(),
        "classes_dtype": classes.dtype.str if classes.dtype != object else "str",
        "feature_names": est.feature_names_,
        "feature_names_in": (
            [str(v) for v in est.feature_names_in_] if hasattr(est, "feature_names_in_") else None
        ),
        "n_features_in": int(est.n_features_in_),
        "n_classes": len(classes),
        "evidence_nodes_fitted": est.evidence_nodes_,
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
        check_params(est, PARAMETER_CONSTRAINTS)
        est.classes_ = np.asarray(meta["classes"], dtype=None if meta["classes_dtype"] == "str"
                                  else np.dtype(meta["classes_dtype"]))
    except (TypeError, ValueError) as err:
        raise ValueError(f"{path}: invalid parameters or classes in model.json: {err}") from err
    # Models saved before the read-out was resolved at fit time read what their preset read then
    # (compact: all nodes; medium, deep: leaves).
    legacy = "all" if meta["params"].get("variant") == "compact" else "leaves"
    fitted_nodes = meta.get("evidence_nodes_fitted", legacy)
    if fitted_nodes not in ("leaves", "all"):
        raise ValueError(f"{path}: evidence_nodes_fitted is {fitted_nodes!r}, expected 'leaves' or 'all'")
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
    est.leaf_gaussians_ = _load_leaf_gaussians(path, tree, meta["n_features_in"], arrays)
    est.rule_prototypes_ = _load_prototypes(path, int(tree.is_leaf.sum()), meta["n_features_in"], arrays)
    est.tree_ = tree
    est.n_rules_ = int(tree.is_leaf.sum())
    est.evidence_nodes_ = fitted_nodes
    est.rule_alone_ = arrays.get("rule_alone")  # None in files saved before it was recorded
    est.evidence_weights_ = _load_weights(path, est, tree, meta, arrays)
    scores = arrays.get("set_scores")
    if scores is not None:
        if scores.ndim != 1 or not scores.size or scores.dtype != np.float64 or not np.isfinite(scores).all():
            raise ValueError(f"{path}: corrupted model (set_scores must be finite float64 of shape "
                             f"(n_cal,)); calibrate and save the model again")
        est.set_scores_ = scores
    # both absent unless calibrate_novelty was called
    est.discount_point_ = _calibration(path, arrays, "discount_point", 2, "(tau, width)", [1])
    est.novelty_reference_ = _calibration(path, arrays, "novelty_reference", 4, "(mu_t, sd_t, mu_e, sd_e)",
                                          [1, 3])
    learned = est.evidence_weights_ is not None
    reference = est.novelty_reference_
    if ((reference is not None and (not learned or not spread_ok(reference)))
            or (learned and est.discount_point_ is not None and reference is None)):
        raise ValueError(f"{path}: corrupted model (the joint score's novelty_reference must come with "
                         "learned weights of evidence, with positive spreads, and with the discount_point "
                         "of such a model); call calibrate_novelty and save the model again")
    return est


def _calibration(path, arrays: dict, name: str, size: int, what: str,
                 positive: list[int]) -> np.ndarray | None:
    """A saved calibration array of ``calibrate_novelty`` (None when absent), or ValueError naming
    what is wrong with it."""
    value = arrays.get(name)
    if value is None:
        return None
    if (value.shape != (size,) or value.dtype != np.float64 or not np.isfinite(value).all()
            or (value[positive] <= 0).any()):
        raise ValueError(f"{path}: corrupted model ({name} must be finite float64 {what} with positive "
                         f"scales); call calibrate_novelty and save the model again")
    return value


def _load_weights(path, est, tree: FuzzyTree, meta: dict, arrays: dict) -> EvidenceWeights | None:
    """The learned weights of evidence of a ``evidence_weights="learned"`` model (finite, of shapes
    (n_classes, n_features + n_leaves) and (n_classes,)), else None; ValueError names a problem."""
    if est.evidence_weights == "tree":
        return None
    n_sources = meta["n_features_in"] + int(tree.is_leaf.sum())
    shapes = {"coef": (meta["n_classes"], n_sources), "intercept": (meta["n_classes"],)}
    values = {}
    for k, shape in shapes.items():
        v = arrays.get(f"weights_{k}")
        if v is None or v.shape != shape or v.dtype != np.float64 or not np.isfinite(v).all():
            got = None if v is None else (v.shape, v.dtype)
            raise ValueError(f"{path}: corrupted model (weights_{k} must be finite float64 of shape {shape}, "
                             f"got {got}); refit and save the model again")
        values[k] = v
    return EvidenceWeights(**values)


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
    problem = tree.structure_problem(d) or _value_problem(est, tree, d)
    if problem:
        fail(problem)
    alone = arrays.get("rule_alone")
    if alone is not None and (alone.shape != (int(tree.is_leaf.sum()),)
                              or not ((alone >= 0) & (alone <= 1)).all()):
        fail("rule_alone is not one share in [0, 1] per rule")


def _value_problem(est, tree: FuzzyTree, d: int) -> str | None:
    """The first value a fitted model cannot hold (on top of `FuzzyTree.structure_problem`), or None.

    Duplicated classes or feature names, an internal node whose observed range has lo > hi or
    whose trapezoid (a, b, c, d) is not ordered a <= b <= c <= d or has a ramp that is neither an
    infinite shoulder (``a = b = -inf``, ``c = d = +inf``) nor of finite width (its membership
    would be ``inf / inf``), and free-feature Gaussians
    (paper eq. 3) that are not finite, with a non-negative variance, off the root-to-node path.
    """
    for what, names in (("classes", est.classes_.tolist()), ("feature names", est.feature_names_),
                        ("feature_names_in", getattr(est, "feature_names_in_", np.array([])).tolist())):
        dup = sorted({str(v) for v in names if names.count(v) > 1})
        if dup:
            return f"duplicated {what} {dup[:5]}"
    internal = np.flatnonzero(tree.feature >= 0)
    bad = internal[~(tree.lo[internal] <= tree.hi[internal])]
    if bad.size:
        return f"node {bad[0]} has an observed range lo > hi ({tree.lo[bad[0]]} > {tree.hi[bad[0]]})"
    trap = tree.trap[internal]
    bad = internal[~np.all(trap[:, :-1] <= trap[:, 1:], axis=1)]
    if bad.size:
        return f"node {bad[0]} has a trapezoid {tree.trap[bad[0]].tolist()} that is not a <= b <= c <= d"
    with np.errstate(over="ignore", invalid="ignore"):  # each ramp a shoulder or of finite width
        ramps = ((trap[:, 1] == -np.inf) | np.isfinite(trap[:, 1] - trap[:, 0])) \
            & ((trap[:, 2] == np.inf) | np.isfinite(trap[:, 3] - trap[:, 2]))
    bad = internal[~ramps]
    if bad.size:
        return (f"node {bad[0]} has a trapezoid {tree.trap[bad[0]].tolist()} with a ramp the firing "
                f"cannot read: an infinite end that is no shoulder, or wider than float64 holds")
    free = ~tree.path_mask(d)
    for name, arr, low in (("free_mean", tree.free_mean, -np.inf), ("free_var", tree.free_var, 0.0)):
        bad = free & ~(np.isfinite(arr) & (arr >= low))
        if bad.any():
            o, f = (int(v) for v in np.argwhere(bad)[0])
            return (f"{name} of node {o}, feature {est.feature_names_[f]!r} is {arr[o, f]} (must be finite"
                    f"{', >= 0' if low == 0 else ''} for a feature off the node's path)")
    return None


def _leaf_arrays(model: LeafGaussians) -> dict[str, np.ndarray]:
    """The leaf Gaussians' saved arrays; covariances as their lower triangles (they are symmetric),
    diagonal ones (`ferl.novelty.leaf_fit`) as their variances."""
    arrays = {f"leaf_{k}": getattr(model, k) for k in LeafGaussians.SAVED_FIELDS if k != "cov"}
    if model.cov.ndim == 2:
        arrays["leaf_cov_diag"] = model.cov
        return arrays
    rows, cols = np.tril_indices(model.cov.shape[1])
    arrays["leaf_cov_tril"] = model.cov[:, rows, cols]
    return arrays


def _load_leaf_gaussians(path, tree: FuzzyTree, d: int, arrays: dict) -> LeafGaussians:
    """Rebuild the leaf Gaussians; ValueError for missing arrays or a hand-edited, inconsistent file
    (shapes, finiteness, the tree's leaves, positive scales and width, covariances symmetric
    with the ridge on their variances and no eigenvalue below minus their rounding level)."""
    diagonal = "leaf_cov_diag" in arrays
    names = [f"leaf_{k}" for k in LeafGaussians.SAVED_FIELDS if k != "cov"] + [
        "leaf_cov_diag" if diagonal else "leaf_cov_tril"]
    missing = [k for k in names if k not in arrays]
    if missing:
        raise ValueError(f"{path} lacks the leaf Gaussian arrays {missing} (a model saved by an older "
                         f"version); refit and save the model again")
    fields = {k: arrays[f"leaf_{k}"] for k in LeafGaussians.SAVED_FIELDS if k != "cov"}
    rows, cols = np.tril_indices(1 if diagonal else d)
    leaves = np.flatnonzero(tree.is_leaf)
    shapes = dict(center=(d,), scale=(d,), leaves=leaves.shape, mean=(leaves.size, d), reliability=(2,),
                  cov_tril=(leaves.size, d if diagonal else rows.size))
    fields["cov_tril"] = arrays["leaf_cov_diag" if diagonal else "leaf_cov_tril"]
    for name, shape in shapes.items():
        arr = fields[name]
        if arr.shape != shape or arr.dtype.kind not in "fi" or not np.isfinite(arr).all():
            _corrupted(path, f"leaf Gaussian array {name!r} has shape {arr.shape} (not {shape}) or is "
                             f"not finite")
    if not np.array_equal(fields["leaves"], leaves):
        _corrupted(path, "the leaf Gaussians do not belong to the tree's leaves")
    if (fields["scale"] <= 0).any() or fields["reliability"][1] <= 0:
        _corrupted(path, "a leaf Gaussian scale or reliability width is not positive")
    if diagonal:  # variances only, each holding the ridge
        cov = fields.pop("cov_tril")
        if (cov < RIDGE * (1 - 1e-9)).any():
            _corrupted(path, "a leaf variance lost its ridge")
        return LeafGaussians(**{k: np.asarray(v, dtype=np.float64) if k != "leaves" else v
                                for k, v in fields.items()}, cov=np.asarray(cov, dtype=np.float64))
    cov = np.zeros((leaves.size, d, d))
    cov[:, rows, cols] = fields.pop("cov_tril")
    cov[:, cols, rows] = cov[:, rows, cols]
    # every variance holds the ridge; a small leaf that takes the pooled correlations
    # (`ferl.novelty.leaf_gaussians`) can have eigenvalues far below it, so the check is definiteness itself
    # (up to its rounding: a covariance near 1e58, weights spanning 1e580, came out indefinite by 1e42)
    lam = np.linalg.eigvalsh(cov)
    if leaves.size and (np.diagonal(cov, axis1=1, axis2=2).min() < RIDGE * (1 - 1e-9)
                        or (lam.min(axis=1) < -d * np.finfo(np.float64).eps * np.abs(lam).max(axis=1)).any()):
        _corrupted(path, "a leaf covariance is not positive definite or lost its ridge")
    return LeafGaussians(**{k: np.asarray(v, dtype=np.float64) if k != "leaves" else v
                            for k, v in fields.items()}, cov=cov)


def _load_prototypes(path, n_leaves: int, n_features: int, arrays: dict) -> RulePrototypes:
    """Rebuild the rule prototypes; ValueError for missing arrays or a hand-edited file (the index
    not increasing leaf positions, the reference not two sorted rows of finite scores >= 0, the
    discount not a finite ``(tau >= 0, lambda > 0)``, the unit not ``n_features`` finite values
    ``>= 1``)."""
    names = [f"prototype_{k}" for k in RulePrototypes.SAVED_FIELDS]
    if missing := [k for k in names if k not in arrays]:
        raise ValueError(f"{path} lacks the rule prototype arrays {missing} (a model saved by an older "
                         f"version); refit and save the model again")
    index, reference, discount, unit = (arrays[k] for k in names)
    if (index.ndim != 1 or index.size == 0 or index.dtype.kind != "i" or index.min() < 0
            or index.max() >= n_leaves or (np.diff(index) <= 0).any()):
        _corrupted(path, "the prototype index is not increasing positions of the tree's leaves")
    if (reference.ndim != 2 or reference.shape[0] != 2 or reference.shape[1] == 0
            or reference.dtype.kind != "f" or not np.isfinite(reference).all() or (reference < 0).any()
            or (np.diff(reference, axis=1) < 0).any()):
        _corrupted(path, "the prototype reference is not two sorted rows of finite scores >= 0")
    if (discount.shape != (2,) or discount.dtype.kind != "f" or not np.isfinite(discount).all()
            or discount[0] < 0 or discount[1] <= 0):
        _corrupted(path, "the evidence discount is not a finite (tau >= 0, lambda > 0)")
    if (unit.shape != (n_features,) or unit.dtype.kind != "f" or not np.isfinite(unit).all()
            or (unit < 1).any()):  # below 1 (fit gives >= 2, or 1), in-range inputs could overflow
        _corrupted(path, f"the prototype unit is not {n_features} finite feature ranges >= 1")
    return RulePrototypes(index.astype(np.int64), reference.astype(np.float64), discount.astype(np.float64),
                          unit.astype(np.float64))


def _corrupted(path, problem: str):
    raise ValueError(f"{path}: corrupted model ({problem}); refit and save the model again")


class ModelFilesMixin:
    """`FERLClassifier`'s ``save`` and ``load`` over this module's files."""

    def save(self, path: str | os.PathLike):
        """Save the fitted model as ``path/model.json`` + ``path/model.npz`` (no pickle, atomic).

        Returns
        -------
        pathlib.Path
            The folder.
        """
        check_is_fitted(self, "tree_")
        return save_classifier(self, path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Self:
        """Load a model saved by `save`; predictions are identical to the saved model's.

        Raises
        ------
        FileNotFoundError, ValueError
            Missing files, another schema version, or a corrupted or hand-edited file.
        """
        return load_classifier(cls, path)
