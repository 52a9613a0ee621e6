"""Figures of heads' outputs: risk–coverage curves, reliability diagrams, a confusion matrix.

Functions of plain arrays, used by the run report (:mod:`cbm.report`) and the open-world report
(:mod:`cbm.openworld.report`), which is why they live here and not in ``cbm.report`` (a stage
imports only from the stages above it). Each returns a ``matplotlib.figure.Figure``; nothing here
writes files.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

from ferl import metrics as M

__all__ = ["confusion_figure", "reliability_bins", "reliability_figure", "risk_coverage_figure"]

#: Series = (y_true, y_pred, confidence) arrays of one evaluation (a fold, a split).
Series = tuple[np.ndarray, np.ndarray, np.ndarray]

#: Line styles of the risk-coverage curves, in turn.
LINE_STYLES = ("-", "--", ":", "-.")


def risk_coverage_figure(curves: Mapping[str, Sequence[Series]], title: str = "",
                         n_grid: int = 201) -> Figure:
    """Selective accuracy against coverage, one line per confidence score.

    Inputs are accepted in decreasing confidence (:func:`ferl.metrics.risk_coverage_curve`, ties
    counted at their expected risk); the curve at coverage c is the accuracy of the accepted
    fraction c. Several evaluations of one score (folds) are averaged vertically on a grid of
    ``n_grid`` coverages.

    Parameters
    ----------
    curves : mapping of str to sequence of (y_true, y_pred, confidence)
        Score label -> one triple of (n,) arrays per evaluation; higher confidence = accepted first.
    title : str

    Returns
    -------
    Figure
        The legend gives each score's AURC (0-100, lower is better; mean over evaluations).

    Raises
    ------
    ValueError
        No curves, or arrays that :func:`ferl.metrics.risk_coverage_curve` rejects.
    """
    if not curves:
        raise ValueError("no risk-coverage curves to draw")
    grid = np.linspace(0.0, 1.0, n_grid)
    fig = Figure(figsize=(6.2, 4.6))
    ax = fig.subplots()
    for i, (label, runs) in enumerate(curves.items()):
        acc, aurc = [], []
        for y_true, y_pred, conf in runs:
            cov, risk = M.risk_coverage_curve(y_true, y_pred, conf)
            acc.append(np.interp(grid, np.r_[0.0, cov], np.r_[1.0 - risk[0], 1.0 - risk]))
            aurc.append(100 * risk.mean())
        # identical curves (a head's BetP and its belief, LR and the concept-restricted LR using
        # every concept) lie on each other: a line style and width per curve keeps both visible
        ax.plot(100 * grid, 100 * np.mean(acc, axis=0), lw=2.6 - 0.5 * (i % 4), ls=LINE_STYLES[i % 4],
                label=f"{label} (AURC {np.mean(aurc):.1f})")
    ax.set(xlabel="coverage: inputs accepted (%)", ylabel="selective accuracy (%)", xlim=(0, 100))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower left")
    ax.set_title(title or "Risk–coverage: accuracy of the most confident inputs", fontsize=10)
    fig.tight_layout()
    return fig


def reliability_bins(confidence: np.ndarray, outcome: np.ndarray, n_bins: int = 15
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Equal-width confidence bins: mean confidence, outcome rate and count of each non-empty bin.

    Bins as in :func:`ferl.metrics.expected_calibration_error` (``[0, 1/B), ..., [(B-1)/B, 1]``), so
    the returned ECE equals it for top-label confidences.

    Parameters
    ----------
    confidence : ndarray of shape (n,), float in [0, 1]
    outcome : ndarray of shape (n,), {0, 1} or bool
        1 where the event happened (a correct prediction, a present concept).
    n_bins : int

    Returns
    -------
    mean_confidence, rate, count : ndarray of shape (n_nonempty,)
    ece : float
        ``sum_b count_b / n * |rate_b - mean_confidence_b|``.

    Raises
    ------
    ValueError
        Empty or mismatched inputs, or confidences outside [0, 1] / not finite.
    """
    conf = np.asarray(confidence, dtype=float).ravel()
    out = np.asarray(outcome, dtype=float).ravel()
    if conf.size == 0 or conf.shape != out.shape:
        raise ValueError(f"confidence {conf.shape} and outcome {out.shape} must be equal, non-empty")
    if not np.all(np.isfinite(conf)) or conf.min() < 0 or conf.max() > 1:
        raise ValueError("confidence must be finite and in [0, 1]")
    bins = np.minimum((conf * n_bins).astype(np.int64), n_bins - 1)
    count = np.bincount(bins, minlength=n_bins)
    conf_sum = np.bincount(bins, weights=conf, minlength=n_bins)
    out_sum = np.bincount(bins, weights=out, minlength=n_bins)
    keep = count > 0
    mean_conf, rate = conf_sum[keep] / count[keep], out_sum[keep] / count[keep]
    ece = float(np.sum(count[keep] * np.abs(rate - mean_conf)) / conf.size)
    return mean_conf, rate, count[keep], ece


def reliability_figure(panels: Mapping[str, Mapping[str, tuple[np.ndarray, np.ndarray]]], *,
                       xlabel: str = "confidence (largest class probability)",
                       ylabel: str = "accuracy", title: str = "", n_bins: int = 15) -> Figure:
    """Reliability diagrams: observed rate against mean confidence per bin, one panel per key.

    Parameters
    ----------
    panels : mapping of str to mapping of str to (confidence, outcome)
        Panel title (a head) -> series label (e.g. ``raw`` / ``calibrated``) -> arrays of shape (n,).
    xlabel, ylabel, title : str
    n_bins : int
        Equal-width bins (:func:`reliability_bins`); markers grow with the bin's count.

    Returns
    -------
    Figure
        The diagonal is perfect calibration; the legend gives each series' ECE (%).
    """
    if not panels:
        raise ValueError("no reliability panels to draw")
    cols = min(3, len(panels))
    rows = -(-len(panels) // cols)
    fig = Figure(figsize=(3.6 * cols, 3.3 * rows))
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).ravel()
    colours = ("#969696", "#3182bd", "#e6550d", "#31a354")
    for ax, (name, series) in zip(axes, panels.items(), strict=False):
        ax.plot([0, 1], [0, 1], color="black", lw=0.7, ls=":")
        for colour, (label, (conf, outcome)) in zip(colours, series.items(), strict=False):
            x, y, n, ece = reliability_bins(conf, outcome, n_bins)
            ax.plot(x, y, color=colour, lw=1.2, label=f"{label} (ECE {100 * ece:.1f})")
            ax.scatter(x, y, s=8 + 60 * n / n.max(), color=colour, zorder=3)
        ax.set(xlim=(0, 1), ylim=(-0.02, 1.02), title=name)
        ax.title.set_fontsize(9)
        ax.set_xlabel(xlabel, fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.legend(fontsize=7, loc="upper left")
    for ax in axes[len(panels):]:
        ax.set_axis_off()
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def confusion_figure(y_true: Sequence[str], y_pred: Sequence[str], abstained: np.ndarray,
                     true_classes: Sequence[str], predicted_classes: Sequence[str],
                     title: str = "") -> Figure:
    """Confusion matrix: rows are true classes, columns the predicted classes plus ``abstain``.

    An input whose credal set is every class counts under ``abstain`` instead of its point
    prediction. Colour: the row's share; numbers: counts (shown up to 40 columns).

    Parameters
    ----------
    y_true, y_pred : sequence of str of length n
    abstained : ndarray of shape (n,), bool
    true_classes, predicted_classes : sequence of str
        Row and column order (rows may hold classes the head never predicts, e.g. held-out ones).

    Raises
    ------
    ValueError
        Lengths differ, or a label is not in the row / column lists.
    """
    y_true, y_pred = [str(v) for v in y_true], [str(v) for v in y_pred]
    abstained = np.asarray(abstained, dtype=bool)
    if not len(y_true) == len(y_pred) == abstained.size:
        raise ValueError("y_true, y_pred and abstained must have the same length")
    rows = {c: i for i, c in enumerate(map(str, true_classes))}
    cols = {c: i for i, c in enumerate(map(str, predicted_classes))}
    unknown = sorted({t for t in y_true if t not in rows} | {p for p in y_pred if p not in cols})
    if unknown:
        raise ValueError(f"labels missing from the confusion matrix's rows or columns: {unknown[:10]}")
    counts = np.zeros((len(rows), len(cols) + 1), dtype=np.int64)
    for t, p, a in zip(y_true, y_pred, abstained, strict=True):
        counts[rows[t], len(cols) if a else cols[p]] += 1
    share = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
    side = 0.32 * max(len(rows), len(cols) + 1)
    fig = Figure(figsize=(max(5.0, side + 2), max(4.0, 0.32 * len(rows) + 1.8)))
    ax = fig.subplots()
    image = ax.imshow(share, cmap="Blues", vmin=0, vmax=1, aspect="auto")
    labels = [*cols, "abstain"]
    ax.set_xticks(np.arange(len(labels)), labels, rotation=90, fontsize=7)
    ax.set_yticks(np.arange(len(rows)), list(rows), fontsize=7)
    if len(labels) <= 40:
        for (r, c), n in np.ndenumerate(counts):
            if n:
                ax.text(c, r, str(n), ha="center", va="center", fontsize=6,
                        color="white" if share[r, c] > 0.6 else "black")
    ax.set(xlabel="predicted class (abstain: credal set = every class)", ylabel="true class")
    fig.colorbar(image, ax=ax, fraction=0.04, label="share of the row")
    ax.set_title(title or "Confusion matrix", fontsize=10)
    fig.tight_layout()
    return fig
