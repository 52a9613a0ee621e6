"""Cross-validation protocol of the tabular benchmark (paper §4.1, appendix G).

Stratified ``k``-fold cross-validation (5 in the paper); inside each outer training fold 25 % is
reserved, stratified, for conformal calibration and every model is fitted on the remaining 75 %
(the *fit* part). Min-max scaling is fitted on the fit part only and applied to the calibration
and test parts (whose values may therefore leave ``[0, 1]``).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass

import numpy as np
from sklearn.model_selection import StratifiedKFold
from sklearn.preprocessing import MinMaxScaler

from ferl import metrics as M
from ferl.benchmarks.methods import Method, make_method

__all__ = ["FoldData", "FoldSplit", "evaluate_method", "make_splits", "run_methods", "scale_fold"]


@dataclass(frozen=True)
class FoldSplit:
    """Row indices of one outer fold.

    Attributes
    ----------
    fold : int
        Fold number ``0..n_folds-1``.
    fit, cal, test : ndarray of int64
        Disjoint indices: model fitting (75 % of the outer training fold), conformal
        calibration (25 %), and the outer test fold.
    """

    fold: int
    fit: np.ndarray
    cal: np.ndarray
    test: np.ndarray


@dataclass(frozen=True)
class FoldData:
    """Scaled arrays of one fold (scaler fitted on ``X_fit``'s rows only).

    Attributes
    ----------
    X_fit, X_cal, X_test : ndarray of shape (n_part, d), float64
    y_fit, y_cal, y_test : ndarray of shape (n_part,), int64
    n_classes : int
    """

    X_fit: np.ndarray
    y_fit: np.ndarray
    X_cal: np.ndarray
    y_cal: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    n_classes: int


def _stratified_reserve(
    indices: np.ndarray, y: np.ndarray, fraction: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Split ``indices`` class by class: ``round(fraction * n_c)`` of each class (at most
    ``n_c - 1``, so every class present keeps a member) go to the reserve."""
    keep, reserve = [], []
    for c in np.unique(y[indices]):
        members = rng.permutation(indices[y[indices] == c])
        n_reserve = min(int(round(fraction * members.size)), members.size - 1)
        reserve.append(members[:n_reserve])
        keep.append(members[n_reserve:])
    return np.sort(np.concatenate(keep)), np.sort(np.concatenate(reserve))


def make_splits(
    y: np.ndarray, n_folds: int = 5, seed: int = 0, cal_fraction: float = 0.25
) -> list[FoldSplit]:
    """Stratified outer folds with a stratified calibration reserve inside each training fold.

    Outer folds come from scikit-learn's ``StratifiedKFold`` (shuffled); a class with fewer
    members than ``n_folds`` is spread over as many folds as it has members (its warning is
    silenced). The calibration reserve takes ``round(cal_fraction * n_c)`` members of each class
    ``c`` of the training fold, at most ``n_c - 1``, so every class of the training fold is in
    the fit part.

    Parameters
    ----------
    y : ndarray of shape (n_samples,), int
        Encoded labels.
    n_folds : int >= 2, default=5
    seed : int, default=0
        Seeds the fold shuffle and (with the fold number) each calibration reserve.
    cal_fraction : float in (0, 1), default=0.25

    Returns
    -------
    list of FoldSplit
        One per fold; the test folds partition ``0..n_samples-1``.

    Raises
    ------
    ValueError
        ``n_folds < 2`` or larger than the number of samples, or a bad ``cal_fraction``.
    """
    y = np.asarray(y)
    if not 2 <= n_folds <= y.size:
        raise ValueError(f"n_folds must be in [2, n_samples={y.size}], got {n_folds}")
    if not 0.0 < cal_fraction < 1.0:
        raise ValueError(f"cal_fraction must be in (0, 1), got {cal_fraction}")
    outer = StratifiedKFold(n_splits=n_folds, shuffle=True, random_state=seed)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The least populated class", category=UserWarning)
        folds = list(outer.split(np.zeros(y.size), y))
    splits = []
    for fold, (train, test) in enumerate(folds):
        rng = np.random.default_rng([seed, fold])
        fit, cal = _stratified_reserve(train, y, cal_fraction, rng)
        splits.append(FoldSplit(fold, fit, cal, np.sort(test)))
    return splits


def scale_fold(X: np.ndarray, y: np.ndarray, split: FoldSplit, n_classes: int) -> FoldData:
    """Min-max scale the three parts of a fold with a scaler fitted on the fit part only.

    Parameters
    ----------
    X : ndarray of shape (n_samples, d), float
    y : ndarray of shape (n_samples,), int
    split : FoldSplit
    n_classes : int

    Returns
    -------
    FoldData
    """
    scaler = MinMaxScaler().fit(X[split.fit])
    return FoldData(
        scaler.transform(X[split.fit]), y[split.fit],
        scaler.transform(X[split.cal]), y[split.cal],
        scaler.transform(X[split.test]), y[split.test],
        n_classes,
    )


def evaluate_method(method: Method, data: FoldData) -> dict[str, float]:
    """Fit one method on a fold and measure it on the test part.

    Confidence for AURC is the largest predicted probability. Set metrics are ``nan`` for
    methods without set-valued output.

    Parameters
    ----------
    method : Method
        Unfitted; fitted in place.
    data : FoldData

    Returns
    -------
    dict
        ``accuracy``, ``ece``, ``coverage``, ``determinacy``, ``u65``, ``u80`` (fractions),
        ``aurc`` (0-100), ``size`` (leaves / rules), ``set_size``, ``fit_time`` and
        ``predict_time`` (seconds).
    """
    start = time.perf_counter()
    method.fit(data.X_fit, data.y_fit, data.X_cal, data.y_cal, data.n_classes)
    fit_time = time.perf_counter() - start
    start = time.perf_counter()
    proba = method.predict_proba(data.X_test)
    sets = method.predict_set(data.X_test, proba)
    predict_time = time.perf_counter() - start
    y = data.y_test
    pred = proba.argmax(axis=1)
    row = {
        "accuracy": M.accuracy(y, pred),
        "aurc": M.aurc(y, pred, proba.max(axis=1)),
        "ece": M.expected_calibration_error(y, np.clip(proba, 0.0, 1.0)),
        "size": method.size(),
        "fit_time": fit_time,
        "predict_time": predict_time,
    }
    set_names = ("coverage", "determinacy", "set_size", "u65", "u80")
    if sets is None:
        row.update(dict.fromkeys(set_names, float("nan")))
    else:
        row.update(
            coverage=M.coverage(y, sets),
            determinacy=M.determinacy(sets),
            set_size=M.mean_set_size(sets),
            u65=M.u65(y, sets),
            u80=M.u80(y, sets),
        )
    return row


def run_methods(
    data: FoldData, names: list[str], seed: int
) -> tuple[list[dict[str, float | str]], dict[str, Method]]:
    """Evaluate every named method on one fold.

    Parameters
    ----------
    data : FoldData
    names : list of str
        Registry keys of :data:`ferl.benchmarks.methods.METHODS`.
    seed : int
        Seed of every method.

    Returns
    -------
    rows : list of dict
        ``{"method": name, **metrics}`` per method.
    fitted : dict of str to Method
        The fitted methods (reused by the ablation and shift studies).
    """
    rows, fitted = [], {}
    for name in names:
        method = make_method(name, seed)
        rows.append({"method": name, **evaluate_method(method, data)})
        fitted[name] = method
    return rows, fitted
