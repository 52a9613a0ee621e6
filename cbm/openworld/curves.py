"""The open-world report's curves, from the folds' files (``scores.npz``, concept tables, CSV logs).

:func:`curve_figures` returns the PNG bytes of

* ``risk_coverage.png``: the first FERL head's predictions on retained **and** held-out test images
  (a held-out image is always an error: its class was never trained on), accepted in the order of
  each score: FERL's pignistic probability, belief of the predicted class and ignorance m(Θ), and
  every novelty score (FERL's kinds and the dedicated detectors; lowest score accepted first).
  Curves are averaged over seeds and folds;
* ``reliability.png``: concept probabilities against concept labels, raw (the detector) vs
  calibrated (the fold's isotonic maps, fitted on retained val), on retained and on held-out test
  images, pooled over folds; and the FERL head's largest class probability on retained test images;
* ``training_curves.png``: the first seed's fold detectors, per epoch (CSV logs);
* ``confusion.png``: the FERL head on the first fold's retained and held-out test images.

:func:`curves_markdown` is the report text that shows them.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from cbm.concepts.calibration import ConceptCalibrator
from cbm.data.concept_tables import load_concept_tables
from cbm.detector.curves import read_training_log, training_curves_figure
from cbm.heads.curves import confusion_figure, reliability_figure, risk_coverage_figure
from cbm.heads.tables import HEAD_LABELS

__all__ = ["curve_figures", "curves_markdown"]


def curves_markdown(figures: Sequence[str]) -> str:
    """The report's "Curves" section showing ``figures`` (file names from :func:`curve_figures`)."""
    text = [
        "## Curves", "",
        "Risk–coverage: the FERL head's predictions on retained and held-out test images together (a "
        "held-out image is always wrong), accepted in the order of each score; a score that rejects the "
        "held-out images first keeps accuracy high further right (AURC in the legend, lower is better; "
        "mean over seeds and folds).", "", "![risk-coverage](risk_coverage.png)", "",
        "Reliability: concept probabilities of the detector (raw) and after the fold's isotonic calibration "
        "(fitted on retained val) against the concept labels, on retained and on held-out test images "
        "(pooled over folds); and the FERL head's largest class probability against its accuracy on "
        "retained test images. ECE (15 bins) in the legends.", "", "![reliability](reliability.png)", "",
        "Confusion matrix of the FERL head on the first fold's retained and held-out test images "
        "(abstentions in their own column):", "", "![confusion matrix](confusion.png)", ""]
    if "training_curves.png" in figures:
        text += ["Training of the first seed's fold detectors (CSV logs):", "",
                 "![training curves](training_curves.png)", ""]
    return "\n".join(text)


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return buf.getvalue()


class _Fold:
    """One fold's files: ``scores.npz``, test / novel concept tables, calibrator, fold directory."""

    def __init__(self, fold_dir: Path, r: dict) -> None:
        self.dir = Path(fold_dir)
        self.label = f"seed {r['seed']} fold {r['fold']}"
        self.seed = r["seed"]
        with np.load(self.dir / r["scores_file"]) as z:
            self.z = {k: z[k] for k in z.files}
        self.tables = load_concept_tables(self.dir, ("test", "novel"))
        self.calibrator = ConceptCalibrator.load(self.dir / "calibration.json")

    def labels(self) -> tuple[np.ndarray, np.ndarray]:
        """True and predicted class names of the retained + held-out test rows."""
        names, classes = np.asarray(self.tables["test"].class_names), self.z["main_classes"]
        y_true = names[np.r_[self.tables["test"].y, self.tables["novel"].y]]
        return y_true, classes[np.r_[self.z["main_pred_test"], self.z["main_pred_novel"]]]

    def both(self, key: str) -> np.ndarray:
        return np.r_[self.z[f"main_{key}_test"], self.z[f"main_{key}_novel"]]


def _risk_coverage(folds: Sequence[_Fold], head: str, label_of: Callable[[str], str]) -> bytes:
    curves: dict[str, list] = {}
    name = HEAD_LABELS.get(head, head)
    for f in folds:
        y_true, y_pred = f.labels()
        scores = {f"{name}: BetP": f.both("proba"), f"{name}: belief": f.both("belief"),
                  f"{name}: ignorance m(Θ)": -f.both("ignorance")}
        for j, d in enumerate(f.z["detectors"].tolist()):
            scores[f"{label_of(d)} score"] = -np.r_[f.z["scores_test"][:, j], f.z["scores_novel"][:, j]]
        for label, conf in scores.items():
            curves.setdefault(label, []).append((y_true, y_pred, conf))
    return _png(risk_coverage_figure(curves, "Risk–coverage on retained + held-out test images "
                                             "(held-out = always wrong)"))


def _reliability(folds: Sequence[_Fold], head: str) -> bytes:
    panels: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
    for part, title in (("test", "concepts, retained test"), ("novel", "concepts, held-out test")):
        raw = [f.tables[part].probs for f in folds]
        cal = [f.calibrator.transform(f.tables[part].probs, f.tables[part].concept_names) for f in folds]
        labels = np.concatenate([f.tables[part].concept_labels.ravel() for f in folds])
        panels[title] = {"raw": (np.concatenate([r.ravel() for r in raw]), labels),
                         "calibrated": (np.concatenate([c.ravel() for c in cal]), labels)}
    correct = [f.labels()[0][: f.tables["test"].n_samples] == f.labels()[1][: f.tables["test"].n_samples]
               for f in folds]
    panels[f"{HEAD_LABELS.get(head, head)}, retained test"] = {
        "calibrated concepts": (np.concatenate([f.z["main_proba_test"] for f in folds]),
                                np.concatenate(correct))}
    return _png(reliability_figure(panels, xlabel="predicted probability", ylabel="observed frequency",
                                   title="Reliability: concepts (raw vs calibrated) and the FERL head"))


def _confusion(f: _Fold, head: str) -> bytes:
    y_true, y_pred = f.labels()
    classes = f.z["main_classes"].tolist()
    rows = classes + sorted(set(y_true.tolist()) - set(classes))
    return _png(confusion_figure(y_true, y_pred, f.both("abstain"), rows, classes,
                                 f"{HEAD_LABELS.get(head, head)}, {f.label}: retained + held-out test "
                                 "images"))


def curve_figures(fold_dirs: Sequence[Path], results: Sequence[dict], head: str,
                  label_of: Callable[[str], str]) -> dict[str, bytes]:
    """PNG bytes of the four figures (module docstring), by file name.

    Parameters
    ----------
    fold_dirs : sequence of path-like
        The folds' directories, one per result.
    results : sequence of dict
        The fold results (``seed``, ``fold``, ``scores_file``).
    head : str
        The FERL head whose outputs ``scores.npz`` holds (the settings' first head).
    label_of : callable
        Score key -> printed name (``cbm.openworld.report.detector_label``).

    Raises
    ------
    KeyError
        A ``scores.npz`` written before it held the head's outputs (``result_version`` < 4).
    """
    folds = [_Fold(d, r) for d, r in zip(fold_dirs, results, strict=True)]
    first_seed = [f for f in folds if f.seed == folds[0].seed]
    logs = {}
    for f in first_seed:
        try:
            logs[f.label] = read_training_log(f.dir)
        except FileNotFoundError:  # a fold whose detector logs were removed
            continue
    figures = {"risk_coverage.png": _risk_coverage(folds, head, label_of),
               "reliability.png": _reliability(folds, head),
               "confusion.png": _confusion(folds[0], head)}
    if logs:
        figures["training_curves.png"] = _png(training_curves_figure(logs, "Fold detectors (first seed)"))
    return figures
