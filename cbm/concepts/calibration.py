"""Per-concept isotonic calibration of a concept detector's probabilities (paper §5.2, appendix).

The paper fits, for every concept, an isotonic regression of the concept label on the detector's
raw probability over the **validation** split and feeds the calibrated vectors to the heads
(Table 4, "calib." column). Each map is a scikit-learn ``IsotonicRegression(increasing=True,
out_of_bounds="clip", y_min=0, y_max=1)``; the fitted map is kept as its knots
(``X_thresholds_``, ``y_thresholds_``) and applied by piecewise-linear interpolation clipped to the
end knots, which is exactly what scikit-learn's ``predict`` computes. Knots survive a JSON round trip
bit for bit, so a saved calibrator gives identical outputs.

Degenerate concepts map to a constant without calling scikit-learn: a concept whose validation
labels are constant maps to that label (kind ``"constant labels"``); a concept whose validation
scores are constant (e.g. a saturated sigmoid that is always exactly 0) maps to its positive rate
(``"constant scores"``). An isotonic fit can also come out flat (``"flat fit"``: scores that differ
only by rounding, ~1e-16, or labels that do not rise with the score). A constant map makes the
calibrated concept carry no information, so `ConceptCalibrator.fit` says so in a
`ConstantCalibrationWarning` naming each such concept and why, and the kind is saved with the map.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from sklearn.isotonic import IsotonicRegression

from cbm.concepts.values import check_concept_values
from cbm.data.concept_tables import check_concept_names
from ferl.io.persist import atomic_write_text, read_json_object
from ferl.metrics import expected_calibration_error

__all__ = ["KINDS", "SCHEMA_VERSION", "ConceptCalibrator", "ConstantCalibrationWarning", "concept_ece",
           "crossfit_calibrate"]

#: Version of the ``calibration.json`` layout.
SCHEMA_VERSION = 1
#: Kind of each concept's map -> why it is constant, in words ("isotonic" maps are not constant).
KINDS = {
    "isotonic": None,
    "constant labels": "every validation label is {value:g}",
    "constant scores": "every validation probability is {x:g}; it maps to the positive rate {value:g}",
    "flat fit": "the isotonic fit is flat at {value:g} (the labels do not rise with the probability, or "
                "the probabilities differ only by rounding)",
}


class ConstantCalibrationWarning(UserWarning):
    """Some concepts' calibration maps are constant: their calibrated values carry no information."""


def concept_ece(probs: np.ndarray, concept_labels: np.ndarray, n_bins: int = 15) -> np.ndarray:
    """Expected calibration error of every concept, as a binary classifier.

    Concept ``j`` is scored by :func:`ferl.metrics.expected_calibration_error` on the two-column
    probabilities ``[1 - p_j, p_j]`` (top-label ECE with ``n_bins`` equal-width bins).

    Parameters
    ----------
    probs : ndarray of shape (n, k), float in [0, 1]
    concept_labels : ndarray of shape (n, k), {0, 1}
    n_bins : int, default=15

    Returns
    -------
    ndarray of shape (k,), float64 in [0, 1]

    Raises
    ------
    ValueError
        Mismatched shapes, NaN, probabilities outside [0, 1] or non-binary labels.
    """
    probs = np.asarray(probs, dtype=np.float64)
    labels = np.asarray(concept_labels)
    if probs.ndim != 2 or probs.shape != labels.shape:
        raise ValueError(f"probs {probs.shape} and concept_labels {labels.shape} must be equal (n, k) shapes")
    if not np.isin(labels, (0, 1)).all():
        raise ValueError("concept_labels must be 0 or 1")
    labels = labels.astype(np.int64)
    return np.array([
        expected_calibration_error(labels[:, j], np.stack([1.0 - probs[:, j], probs[:, j]], axis=1), n_bins)
        for j in range(probs.shape[1])
    ])


class ConceptCalibrator:
    """One monotone isotonic map per concept, fitted on validation probabilities vs labels.

    Attributes (after `fit` or `load`)
    ----------------------------------
    concept_names_ : list of str
        The k concepts, in column order.
    knots_ : list of (ndarray, ndarray)
        Per concept, strictly increasing raw-probability knots ``x`` and non-decreasing calibrated
        values ``y`` in [0, 1]. A single knot is a constant map.
    kinds_ : list of str
        Per concept ``"isotonic"``, ``"constant labels"``, ``"constant scores"`` or ``"flat fit"``
        (`KINDS`; all but the first are constant maps, listed by `constant_maps`).
    n_samples_ : int
        Rows the maps were fitted on.

    Examples
    --------
    >>> cal = ConceptCalibrator().fit(val.probs, val.concept_labels, val.concept_names)
    >>> calibrated = cal.transform(test.probs, test.concept_names)
    """

    def fit(
        self, probs: np.ndarray, concept_labels: np.ndarray, concept_names: Sequence[str]
    ) -> ConceptCalibrator:
        """Fit one isotonic regression per concept.

        Parameters
        ----------
        probs : ndarray of shape (n, k), float in [0, 1]
            Raw detector probabilities of the calibration (validation) split.
        concept_labels : ndarray of shape (n, k), {0, 1}
            Concept labels of the same rows.
        concept_names : sequence of str of length k
            Unique concept names; `transform` and the heads check them.

        Returns
        -------
        self : ConceptCalibrator
            Fitted: one map per concept.

        Raises
        ------
        ValueError
            Wrong shapes, NaN or values outside [0, 1] (the message names row and concept),
            non-binary labels, duplicated names.

        Warns
        -----
        ConstantCalibrationWarning
            Some maps are constant (each concept is named with the reason).
        """
        names = [str(n) for n in concept_names]
        if len(set(names)) != len(names) or not names:
            raise ValueError("concept_names must be non-empty and unique")
        x_all = check_concept_values(probs, names, "calibration probs")
        labels = np.asarray(concept_labels)
        if labels.shape != x_all.shape:
            raise ValueError(f"concept_labels has shape {labels.shape}, expected {x_all.shape}")
        bad = ~np.isin(labels, (0, 1))
        if bad.any():
            r, c = (int(v) for v in np.argwhere(bad)[0])
            raise ValueError(
                f"concept_labels: row {r}, concept {names[c]!r} is {labels[r, c]} (must be 0 or 1)"
            )
        t_all = labels.astype(np.float64)
        knots, kinds = [], []
        for j in range(len(names)):
            x, t = x_all[:, j], t_all[:, j]
            if t.min() == t.max():
                kind, xk, yk = "constant labels", np.zeros(1), t[:1].copy()
            elif x.min() == x.max():
                kind, xk, yk = "constant scores", x[:1].copy(), np.array([t.mean()])
            else:
                iso = IsotonicRegression(increasing=True, out_of_bounds="clip", y_min=0.0, y_max=1.0)
                iso.fit(x, t)
                xk, yk = iso.X_thresholds_.copy(), iso.y_thresholds_.copy()
                kind = "isotonic" if yk.max() > yk.min() else "flat fit"
            knots.append((xk, yk))
            kinds.append(kind)
        self.concept_names_ = names
        self.knots_ = knots
        self.kinds_ = kinds
        self.n_samples_ = int(x_all.shape[0])
        constant = self.constant_maps()
        if constant:
            listed = "; ".join(f"{name!r}: {why}" for name, why in list(constant.items())[:10])
            more = f"; and {len(constant) - 10} more" if len(constant) > 10 else ""
            warnings.warn(f"{len(constant)} of {len(names)} concepts get a constant calibration map (one "
                          f"calibrated value for every input, so the calibrated concept carries no "
                          f"information): {listed}{more}", ConstantCalibrationWarning, stacklevel=2)
        return self

    def constant_maps(self) -> dict[str, str]:
        """Concepts whose map is constant -> why, in words (see `KINDS`); {} when none is."""
        self._check_fitted()
        return {name: KINDS[kind].format(x=xk[0], value=yk[0])
                for name, kind, (xk, yk) in zip(self.concept_names_, self.kinds_, self.knots_, strict=True)
                if KINDS.get(kind) is not None}

    def _check_fitted(self) -> None:
        if not hasattr(self, "knots_"):
            raise ValueError("this ConceptCalibrator is not fitted; call fit() or load() first")

    def transform(self, probs: np.ndarray, concept_names: Sequence[str] | None = None) -> np.ndarray:
        """Map raw concept probabilities to calibrated ones.

        Parameters
        ----------
        probs : ndarray of shape (n, k), float in [0, 1]
            Raw probabilities, columns in the order of ``concept_names_``.
        concept_names : sequence of str, optional
            Names of ``probs``' columns; when given they must equal ``concept_names_`` (same order).

        Returns
        -------
        ndarray of shape (n, k), float64 in [0, 1]
            Monotone non-decreasing in each raw column; inputs outside the fitted range get the
            nearest end value (never NaN).

        Raises
        ------
        ValueError
            Not fitted, other concept names, wrong width, NaN or values outside [0, 1].
        """
        self._check_fitted()
        if concept_names is not None:
            check_concept_names(concept_names, self.concept_names_, source="the concept table",
                                reference="the calibrator")
        x = check_concept_values(probs, self.concept_names_, "probs to calibrate")
        out = np.empty_like(x)
        for j, (xk, yk) in enumerate(self.knots_):
            out[:, j] = np.interp(x[:, j], xk, yk)
        return out

    def fit_transform(
        self, probs: np.ndarray, concept_labels: np.ndarray, concept_names: Sequence[str]
    ) -> np.ndarray:
        """`fit` then `transform` the same probabilities; see both."""
        return self.fit(probs, concept_labels, concept_names).transform(probs)

    # ------------------------------------------------------------------ persistence
    def to_dict(self) -> dict:
        """JSON-able description: schema version, concept names and every map's knots."""
        self._check_fitted()
        return {
            "schema_version": SCHEMA_VERSION,
            "calibrator": "ConceptCalibrator",
            "method": "isotonic (increasing, out_of_bounds=clip, y in [0, 1])",
            "n_samples": self.n_samples_,
            "concept_names": self.concept_names_,
            "maps": [
                {"concept": name, "kind": kind, "x": xk.tolist(), "y": yk.tolist()}
                for name, kind, (xk, yk) in zip(self.concept_names_, self.kinds_, self.knots_, strict=True)
            ],
        }

    def save(self, path: str | os.PathLike) -> Path:
        """Write ``calibration.json`` atomically (floats round-trip exactly). Returns the path."""
        return atomic_write_text(path, json.dumps(self.to_dict(), indent=1) + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike) -> ConceptCalibrator:
        """Read a calibrator written by `save`.

        Raises
        ------
        FileNotFoundError
            No such file.
        ValueError
            Not a calibrator file, another schema version, a missing or invalid ``n_samples``,
            duplicated concept names, an unknown map kind, or knots that are not a monotone map
            into [0, 1].
        """
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"calibration file {path} does not exist")
        doc = read_json_object(path, "a ConceptCalibrator file")
        if doc.get("calibrator") != "ConceptCalibrator":
            raise ValueError(f"{path} is not a ConceptCalibrator file")
        if doc.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(
                f"{path}: schema version {doc.get('schema_version')!r}, this code reads {SCHEMA_VERSION}"
            )
        if not isinstance(doc.get("concept_names"), list) or not isinstance(doc.get("maps"), list) \
                or not all(isinstance(m, dict) and {"concept", "kind", "x", "y"} <= m.keys()
                           for m in doc["maps"]):
            raise ValueError(f"{path}: concept_names or maps (concept, kind, x, y) are missing or malformed")
        names = [str(n) for n in doc["concept_names"]]
        maps = doc["maps"]
        if [m["concept"] for m in maps] != names:
            raise ValueError(f"{path}: the maps' concepts differ from concept_names")
        duplicated = sorted({n for n in names if names.count(n) > 1})
        if duplicated or not names:
            raise ValueError(f"{path}: concept_names must be non-empty and unique; duplicated: "
                             f"{duplicated[:10]}")
        n_samples = doc.get("n_samples")
        if not isinstance(n_samples, int) or isinstance(n_samples, bool) or n_samples < 1:
            found = "missing" if n_samples is None else repr(n_samples)
            raise ValueError(f"{path}: n_samples (the rows the maps were fitted on) is {found}; expected a "
                             "positive integer")
        unknown = sorted({str(m["kind"]) for m in maps} - set(KINDS))
        if unknown:
            raise ValueError(f"{path}: unknown map kinds {unknown}; known: {list(KINDS)}")
        knots = []
        for m in maps:
            try:
                xk, yk = np.asarray(m["x"], dtype=np.float64), np.asarray(m["y"], dtype=np.float64)
            except (TypeError, ValueError) as err:
                raise ValueError(f"{path}: the map of concept {m['concept']!r} is not numeric: {err}") \
                    from err
            if (xk.ndim != 1 or xk.shape != yk.shape or xk.size == 0 or not np.isfinite(xk).all()
                    or not np.isfinite(yk).all() or np.any(np.diff(xk) <= 0)
                    or np.any(np.diff(yk) < 0) or yk.min() < 0 or yk.max() > 1):
                raise ValueError(f"{path}: the map of concept {m['concept']!r} is not monotone into [0, 1]")
            knots.append((xk, yk))
        cal = cls()
        cal.concept_names_ = names
        cal.knots_ = knots
        cal.kinds_ = [str(m["kind"]) for m in maps]
        cal.n_samples_ = n_samples
        return cal


def crossfit_calibrate(probs: np.ndarray, concept_labels: np.ndarray, concept_names: Sequence[str],
                       folds: int = 2, seed: int = 0,
                       extra: tuple[np.ndarray, np.ndarray] | None = None):
    """The calibration split's own rows, each calibrated by maps fitted on the other folds.

    The maps fitted on val fit val's rows in-sample: their calibrated concepts are cleaner than
    test's, so a threshold calibrated on them (a conformal set's) under-covers on test. Rows are
    split into ``folds`` random folds (seeded); each fold is transformed by a `ConceptCalibrator`
    fitted on the others, so every row is calibrated out of sample, like a test row. ``extra`` rows
    of the same images (the val images under calibration corruptions) go through the maps of
    their image's fold, out of sample too.

    Parameters
    ----------
    probs, concept_labels : ndarray of shape (n, k)
        Raw concept probabilities in [0, 1] and 0/1 labels of the calibration split.
    concept_names : sequence of str of length k
    folds : int >= 2
    seed : int
    extra : (ndarray of shape (m, k), ndarray of shape (m,) int) or None
        Other raw probabilities and the row (in ``probs``) of each one's image.

    Returns
    -------
    ndarray of shape (n, k), float64 in [0, 1]
        With ``extra``: a pair, this and the ``extra`` rows calibrated, (m, k).

    Raises
    ------
    ValueError
        Fewer rows than folds, ``folds < 2``, ``extra`` rows of images outside ``probs``, or what
        `ConceptCalibrator.fit` refuses.
    """
    n = len(probs)
    if folds < 2 or n < folds:
        raise ValueError(f"crossfit_calibrate needs folds >= 2 and at least one row per fold; got {folds} "
                         f"folds for {n} rows")
    fold = np.random.default_rng(seed).permutation(n) % folds
    out = np.empty(np.shape(probs), dtype=np.float64)
    if extra is not None:
        extra_probs, rows = np.asarray(extra[0]), np.asarray(extra[1])
        if rows.shape != (len(extra_probs),) or (rows.size and (rows.min() < 0 or rows.max() >= n)):
            raise ValueError(f"crossfit_calibrate: the extra rows must each name one of the {n} rows")
        extra_out = np.empty(np.shape(extra_probs), dtype=np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConstantCalibrationWarning)  # a fold's half of a rare concept
        for k in range(folds):
            part = fold == k
            cal = ConceptCalibrator().fit(probs[~part], concept_labels[~part], concept_names)
            out[part] = cal.transform(probs[part], concept_names)
            if extra is not None and (mine := fold[rows] == k).any():
                extra_out[mine] = cal.transform(extra_probs[mine], concept_names)
    return out if extra is None else (out, extra_out)
