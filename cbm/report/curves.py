"""The report's curves: detector training, risk–coverage, reliability diagrams, confusion matrix.

:func:`curves_section` computes them from a run (its CSV logs, its test and held-out concept tables
and its saved heads) and returns the Markdown of ``report.md``'s "Curves" section; the figures
(:mod:`cbm.detector.curves`, :mod:`cbm.heads.curves`) go to ``plots/``:

* ``training_curves.png``: losses and validation concept metrics per epoch;
* ``risk_coverage.png``: selective accuracy on the test split against coverage, with the FERL head
  ranked by its pignistic probability, its belief Bel = m({c}) of the predicted class (accepting
  the lowest 1 − belief first) and its ignorance m(Θ), and every other head by its largest class
  probability;
* ``reliability.png``: per head, accuracy against confidence (largest class probability) on the
  test split, the head fitted on raw vs on calibrated concepts;
* ``confusion.png``: the FERL head on the test and held-out images, abstentions apart.
"""

from __future__ import annotations

import numpy as np

from cbm.detector.curves import read_training_log, training_curves_figure
from cbm.heads import FERLHead
from cbm.heads.curves import confusion_figure, reliability_figure, risk_coverage_figure
from cbm.heads.operating import decide
from cbm.heads.tables import HEAD_LABELS
from cbm.report.plots import figure_png
from cbm.report.run import RunView

__all__ = ["FIGURES", "curves_section"]

#: The section's figures, below the run directory.
FIGURES = ("plots/training_curves.png", "plots/risk_coverage.png", "plots/reliability.png",
           "plots/confusion.png")


def _label(name: str) -> str:
    return HEAD_LABELS.get(name, name)


def _test_rows(run: RunView, inputs: str, classes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Test concept vectors and true class names of the classes ``classes`` (a head's)."""
    table = run.tables["test"]
    names = np.asarray(run.class_names)[table.y]
    keep = np.isin(names, classes.astype(str))
    return run.concepts("test", inputs)[keep], names[keep]


def _risk_coverage(run: RunView, head: FERLHead, name: str, inputs: str) -> bytes:
    X, y = _test_rows(run, inputs, head.classes_)
    ev = head.model_.evidence(X)
    pred = np.argmax(ev.pignistic, axis=1)
    y_idx = head.class_index(y)
    label = _label(name)
    curves = {f"{label}: BetP": [(y_idx, pred, ev.pignistic.max(axis=1))],
              f"{label}: belief (1 − belief lowest first)":
                  [(y_idx, pred, ev.mass[np.arange(len(pred)), pred])],
              f"{label}: ignorance m(Θ) lowest first": [(y_idx, pred, -ev.ignorance)]}
    for other in run.heads():
        if other == name or not (run.run_dir / "head" / other / inputs).is_dir():
            continue
        h = run.head(other, inputs)
        Xo, yo = _test_rows(run, inputs, h.classes_)
        proba = h.predict_proba(Xo)
        curves[f"{_label(other)}: largest probability"] = [(h.class_index(yo), np.argmax(proba, axis=1),
                                                            proba.max(axis=1))]
    title = f"Risk–coverage on the test split ({inputs} concepts)"
    return figure_png(risk_coverage_figure(curves, title))


def _reliability(run: RunView) -> bytes:
    panels = {}
    for name in run.heads():
        series = {}
        for inputs in ("raw", "calibrated"):
            if (run.run_dir / "head" / name / inputs).is_dir():  # a saved head (current.json or head.json)
                h = run.head(name, inputs)
                X, y = _test_rows(run, inputs, h.classes_)
                proba = h.predict_proba(X)
                series[inputs] = (proba.max(axis=1), np.argmax(proba, axis=1) == h.class_index(y))
        if series:
            panels[_label(name)] = series
    return figure_png(reliability_figure(panels, title="Reliability on the test split: heads fitted on raw "
                                                      "vs calibrated concepts"))


def _confusion(run: RunView, head: FERLHead, name: str, inputs: str) -> bytes:
    y_true, X, features = [], [], []
    for split in ("test", "novel"):
        if split in run.tables and run.tables[split].n_samples:
            X.append(run.concepts(split, inputs))
            y_true += [run.class_names[c] for c in run.tables[split].y]
            features.append(run.tables[split].feature_score)
    known = all(f is not None for f in features)
    dec = decide(head, np.concatenate(X), np.concatenate(features) if known else None)
    classes = [str(c) for c in head.classes_]
    y_pred = [classes[i] for i in np.argmax(dec.evidence.pignistic, axis=1)]
    rows = classes + sorted(set(y_true) - set(classes))
    return figure_png(confusion_figure(y_true, y_pred, dec.abstained, rows, classes,
                                       f"{_label(name)} ({inputs} concepts) on test + held-out images"))


def curves_section(run: RunView, head: FERLHead, name: str, inputs: str,
                   written: dict[str, bytes]) -> list[str]:
    """Markdown of the report's "Curves" section; puts the figures' PNG bytes into ``written``.

    Parameters
    ----------
    run : RunView
    head : FERLHead
        The report's main head (``name``, fitted on ``inputs`` concepts).
    name : str
    inputs : {"raw", "calibrated"}
    written : dict of str to bytes
        Relative path -> file content, filled here (the caller writes the files).
    """
    lines = ["## Curves", "", "### Concept detector training", ""]
    try:
        log = read_training_log(run.run_dir)
        written[FIGURES[0]] = figure_png(training_curves_figure({run.run_dir.name: log}))
        lines += ["Per epoch, from the CSV logs in `detector/logs/`.", "",
                  f"![training curves]({FIGURES[0]})", ""]
    except FileNotFoundError:
        lines += ["No CSV logs in `detector/logs/` (the concept tables were made elsewhere).", ""]
    has_novel = "novel" in run.tables and run.tables["novel"].n_samples > 0
    lines += [
        "### Risk–coverage", "",
        "Accuracy of the inputs a score accepts first, against the share accepted; a better score keeps "
        "the curve high further right (AURC in the legend, lower is better). "
        f"{_label(name)} is ranked three ways: by its pignistic probability, by the belief Bel = m({{c}}) of "
        "its predicted class (1 − belief is the mass that does not support it) and by its ignorance m(Θ); "
        "the other heads by their largest class probability.", "", f"![risk-coverage]({FIGURES[1]})", "",
        "### Reliability", "",
        "Per head, the accuracy of the test images in each bin of confidence (largest class probability) "
        "against the bin's mean confidence, for the head fitted on raw and on calibrated concepts; the "
        "dotted diagonal is perfect calibration, markers grow with the bin's count, ECE (15 bins) in the "
        "legend.", "",
        f"![reliability diagrams]({FIGURES[2]})", "",
        "### Confusion matrix", "",
        f"{_label(name)} ({inputs} concepts) on the test images"
        + (" and the held-out-class images (the last rows: classes never trained on)" if has_novel else "")
        + "; an abstention (credal set = every class) is counted in the `abstain` column.", "",
        f"![confusion matrix]({FIGURES[3]})", ""]
    written[FIGURES[1]] = _risk_coverage(run, head, name, inputs)
    written[FIGURES[2]] = _reliability(run)
    written[FIGURES[3]] = _confusion(run, head, name, inputs)
    return lines
