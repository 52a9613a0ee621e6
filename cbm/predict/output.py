"""Files ``predict`` writes: the table (CSV and/or JSON Lines) and a Markdown page of explanations.

::

    <out>/predictions.csv     one row per input (sets as ``a|b``, attributes as ``name (score); ...``)
    <out>/predictions.jsonl   the same rows as JSON objects (sets and attributes as lists)
    <out>/predictions.md      summary table, then per input: the image beside its evidence figure
                              (:func:`cbm.report.plots.evidence_figure`) and the explanation
    <out>/predictions/<n>.png the figures of the page

Every file is written atomically; figures left by an earlier page in the same folder are removed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cbm.data.common import UnreadableImageError
from cbm.predict.inputs import read_image
from cbm.predict.pipeline import Predictions, flat_row
from cbm.report.plots import evidence_figure, figure_png
from ferl.io.persist import atomic_write_bytes, atomic_write_text

__all__ = ["FORMATS", "write_page", "write_table"]

#: Table formats: file suffix per format name.
FORMATS = {"csv": ".csv", "jsonl": ".jsonl"}
FIGURES = "predictions"


def write_table(pred: Predictions, out: str | os.PathLike, formats: Sequence[str] = ("csv", "jsonl"),
                stem: str = "predictions") -> list[Path]:
    """Write the rows as ``<stem>.csv`` and / or ``<stem>.jsonl`` into ``out``; return the paths.

    Raises
    ------
    ValueError
        An unknown format (the known ones are listed).
    """
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise ValueError(f"unknown table format(s) {bad or 'none'}; choose from {list(FORMATS)}")
    out = Path(out)
    written = []
    if "csv" in formats:
        written.append(atomic_write_text(out / f"{stem}.csv", pred.frame().to_csv(index=False)))
    if "jsonl" in formats:
        lines = [json.dumps(r, ensure_ascii=False) for r in pred.rows]
        written.append(atomic_write_text(out / f"{stem}.jsonl", "\n".join(lines) + "\n"))
    return written


#: Fixed decimals per float column of the summary table, so a column reads as one format
#: (``.3g`` wrote 0.271, 0.27, 0 and 0.00232 in one ignorance column).
_DECIMALS = {"ignorance": 3, "ood_score": 2}


def _cell(value: Any, column: str = "") -> str:
    if isinstance(value, float):
        return f"{value:.{_DECIMALS[column]}f}" if column in _DECIMALS else f"{value:.3g}"
    return "–" if value is None else str(value).replace("|", "\\|")


def _summary(pred: Predictions) -> list[str]:
    cols = ["input", "class", "set", "abstained", "ignorance", "ood_score", "ood_flag",
            "anomalous_attributes"]
    if any(r["true_class"] is not None for r in pred.rows):
        cols.insert(1, "true_class")
    lines = ["| # | " + " | ".join(c.replace("_", " ") for c in cols) + " |",
             "|---:|" + "---|" * len(cols)]
    for i, r in enumerate(pred.rows):
        flat = flat_row(r)
        lines.append(f"| {i + 1} | " + " | ".join(_cell(flat[c], c) for c in cols) + " |")
    return lines


def write_page(pred: Predictions, out: str | os.PathLike, *, title: str = "Predictions",
               limit: int = 100, header: Sequence[str] = ()) -> Path:
    """Write ``predictions.md``: a summary table, then each of the first ``limit`` inputs explained.

    Each explained input shows its evidence figure (the image, belief / plausibility / ignorance per
    class, the anomalous attributes), its OOD decision and :meth:`ferl.explain.Explanation.to_markdown`
    (fired rules with their masses). Unreadable inputs are listed with the reason.

    Parameters
    ----------
    pred : Predictions
    out : path-like
        Output folder.
    title : str
    limit : int
        Inputs explained in full (all of them stay in the summary table).
    header : sequence of str
        Markdown lines placed under the title (run, head, threshold ...).

    Returns
    -------
    Path
        The page.
    """
    out = Path(out)
    t = pred.threshold
    lines = [f"# {title}", "", *header, "",
             f"An input is flagged as novel (`ood flag`) when its {t['kind']} OOD score exceeds "
             f"{t['value']:.4g}, the score that accepts {100 * t['accept']:.0f} % of the run's "
             f"{t['fitted_on']} images.", "", *_summary(pred), ""]
    written = set()
    for i, row in enumerate(pred.rows[:limit]):
        lines += [f"## {i + 1}. `{row['input']}`", ""]
        if row["error"] is not None:
            lines += [f"Not predicted: {row['error']}", ""]
            continue
        try:
            image = None if pred.inputs[i] is None else read_image(pred.inputs[i])
        except UnreadableImageError:  # removed since it was predicted
            image = None
        ex = pred.explain(i)
        name = f"{FIGURES}/{i + 1}.png"
        figure = evidence_figure(ex, image, str(row["input"]))  # laid out with tight_layout
        atomic_write_bytes(out / name, figure_png(figure, dpi=80, tight=False))
        written.add(out / name)
        decision = "**flagged as novel**" if row["ood_flag"] else "within the training distribution"
        lines += [f"![evidence of {row['input']}]({name})", "",
                  f"OOD score {row['ood_score']:.4g} vs threshold {row['ood_threshold']:.4g}: {decision}.",
                  "",
                  ex.to_markdown(), ""]
    if len(pred.rows) > limit:
        lines += [f"The other {len(pred.rows) - limit} inputs are in the table only (`--page-limit`).", ""]
    for stale in (out / FIGURES).glob("*.png"):
        if stale not in written:
            stale.unlink()
    return atomic_write_text(out / "predictions.md", "\n".join(lines).rstrip() + "\n")
