"""The report's open-world section, from an ``evaluate-openworld`` output folder.

It leads with the scores a user meets: the main FERL head's novelty score (the kind its saved
threshold uses, :func:`cbm.report.summary.novelty_kind`) and the baselines (scores of no FERL head),
as a Table-5 layout (:func:`cbm.openworld.report.table5_markdown`) and a ROC figure of those curves
only (``plots/openworld_roc.png``); FERL's other score kinds go to an appendix table. The full
open-world report stays in ``<openworld>/report.md``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from cbm.heads.tables import HEAD_LABELS
from cbm.openworld.report import roc_png, table5_markdown

__all__ = ["ROC_FIGURE", "openworld_sections"]

#: The section's ROC figure, below the run directory.
ROC_FIGURE = "plots/openworld_roc.png"
#: The open-world run's own figures shown here (file -> alt text); ``report.md`` there explains them.
CURVES = {"risk_coverage.png": "open world: risk-coverage, held-out images counted wrong",
          "reliability.png": "open world: reliability of concepts and head",
          "confusion.png": "open world: confusion matrix with the held-out classes",
          "training_curves.png": "open world: training of the fold detectors"}


def _naming(openworld: Path, head: str) -> str:
    """One sentence on attribute naming (precision@3 against chance), or '' without the numbers."""
    path = openworld / "per_fold_heads.csv"
    if not path.is_file():
        return ""
    frame = pd.read_csv(path)
    frame = frame[frame["head"] == head]
    if frame.empty or "precision@3" not in frame:
        return ""
    hits, chance = 100 * frame["precision@3"].mean(), 100 * frame["chance"].mean()
    return (f"{HEAD_LABELS.get(head, head)} also names what is new: {hits:.1f} % of its top-3 anomalous "
            "attributes of a held-out image are concepts in which the image's class differs from the "
            f"nearest trained class (chance {chance:.1f} %).")


def openworld_sections(run_dir: Path, openworld: Path | None, head: str, kind: str | None,
                       written: dict[str, bytes]) -> tuple[list[str], list[str]]:
    """Markdown lines of the open-world section and of its appendix (FERL's other score kinds).

    Parameters
    ----------
    run_dir : Path
        The report's run directory (links are relative to it).
    openworld : Path or None
        The ``evaluate-openworld`` output folder (None or no ``summary.csv``: a line saying so).
    head : str
        The main FERL head.
    kind : str or None
        Its default novelty score kind (None: the first kind the open-world run scored).
    written : dict of str to bytes
        Receives the ROC figure's PNG bytes.

    Returns
    -------
    (section, appendix) : tuple of lists of str
    """
    if openworld is None or not (openworld / "summary.csv").is_file():
        return ["## Open-world evaluation", "", "Not run for this report (`evaluate-openworld`).", ""], []
    rel = Path(os.path.relpath(openworld, run_dir)).as_posix()
    summary = pd.read_csv(openworld / "summary.csv")
    ood = summary[summary["metric"].isin(["auroc", "aupr_out", "fpr95", "reject"])]
    detectors = list(dict.fromkeys(ood["detector"]))
    mine = [d for d in detectors if d.startswith(f"{head}:")]
    default = f"{head}:{kind}" if f"{head}:{kind}" in mine else (mine[:1] or [None])[0]
    baselines = [d for d in detectors if not d.startswith("ferl")]
    lead = [d for d in (default, *baselines) if d is not None]
    others = [d for d in detectors if d not in lead]
    results = [json.loads(p.read_text()) for p in sorted(openworld.glob("seed*/fold*/result.json"))]
    lines = ["## Open-world evaluation", "",
             f"Classes never trained on (held out of a detector retrained without them, `{rel}/`): can a "
             "score tell their test images from those of the trained classes? Held-out images are the "
             "positives; FPR95: trained-class images flagged when 95 % of held-out ones are; Reject: "
             "held-out images above the threshold that accepts 95 % of trained-class val images. "
             + (f"{HEAD_LABELS.get(head, head)}'s row is the score `predict` flags with ({kind}); "
                if kind else "")
             + "its other scores are in the appendix.", "",
             table5_markdown(ood[ood["detector"].isin(lead)], None).rstrip("\n"), ""]
    if results:
        written[ROC_FIGURE] = roc_png(openworld, results, lead)
        lines += [f"![ROC curves of held-out-class detection]({ROC_FIGURE})", ""]
    naming = _naming(openworld, head)
    lines += [*([naming, ""] if naming else [])]
    for name, caption in CURVES.items():
        if (openworld / name).is_file():
            lines += [f"![{caption}]({rel}/{name})", ""]
    lines += [
              f"Full open-world report (attribute naming, curves, examples): "
              f"[{rel}/report.md]({rel}/report.md).", ""]
    appendix = []
    if others:
        appendix = ["### FERL's other novelty scores", "",
                    "The same held-out-class detection with every other score kind the open-world run "
                    "computed: the product's other kinds, the ablation kinds (`ferl.benchmarks.ood_kinds`) "
                    "and the class evidence read as a confidence.",
                    "", table5_markdown(ood[ood["detector"].isin(others)], None).rstrip("\n"), ""]
    return lines, appendix
