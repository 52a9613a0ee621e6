"""The run report's section on covariate shift: an ``evaluate-shift`` folder's tables and figure."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from cbm.shift.report import METHOD_LABELS, shift_png, shift_summary

__all__ = ["shift_section"]

#: The set methods the report's tables show (the shift folder's other methods are in its shift.md).
SHOWN = ("product", "ferl-deep-ds-conformal", "lr-lac", "lr-raps")


def _table(frame: pd.DataFrame) -> list[str]:
    """One table: per method and severity, coverage / answered right (%) / mean answered set size."""
    shown = frame[frame.method.isin(SHOWN)]
    parts = [shift_summary(shown, metric) for metric in ("coverage", "answered_right", "set_size")]
    cols = [str(c) for c in parts[0].columns]
    lines = ["| method | " + " | ".join(f"severity {c}" for c in cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for method in parts[0].index:
        cells = [" / ".join(("–" if v != v else (f"{v:.2f}" if k == 2 else f"{100 * v:.1f}"))
                            for k, v in enumerate(part.loc[method, c] for part in parts))
                 for c in parts[0].columns]
        lines.append(f"| {METHOD_LABELS.get(method, method)} | " + " | ".join(cells) + " |")
    return lines


def shift_section(shift_dir: str | os.PathLike | None, written: dict[str, bytes],
                  run_dir: str | os.PathLike = ".") -> list[str]:
    """The section's Markdown lines (none without a finished ``evaluate-shift`` folder); its figure is
    added to ``written`` as ``plots/shift_coverage.png``; links are relative to ``run_dir`` (where
    ``report.md`` is written).

    Raises
    ------
    ValueError
        A ``shift.json`` or ``shift.csv`` that cannot be read.
    """
    if shift_dir is None or not (Path(shift_dir) / "shift.csv").is_file():
        return []
    folder = Path(shift_dir)
    try:
        meta = json.loads((folder / "shift.json").read_text())
        frame = pd.read_csv(folder / "shift.csv")
    except (OSError, ValueError) as err:
        raise ValueError(f"{folder} is not a finished evaluate-shift folder ({err}); run it again") from err
    written["plots/shift_coverage.png"] = shift_png(frame, meta)
    point = meta["product"].get("operating_point") or {}
    page = Path(os.path.relpath(folder / "shift.md", Path(run_dir))).as_posix()
    lines = ["## Coverage under shift", "",
             f"The run's test images corrupted with {len(meta['corruptions'])} ImageNet-C corruptions "
             f"({', '.join(meta['corruptions'])}) at severities {', '.join(map(str, meta['severities']))} "
             f"({meta['rows']} images; severity 0: the {meta['clean_rows']} clean ones), through the run's "
             "own detector, calibration and heads (`evaluate-shift`). The product's sets widen with the "
             "image's shift score (its detector features' typicality and the head's novelty), as learned on "
             "the val images under ImageNet-C's four validation corruptions, never the evaluated ones; "
             f"a set wider than {point.get('max_set_size', '–')} classes abstains. Means over the "
             f"corruptions; every cell per corruption in [{page}]({page}).", "",
             "![coverage under shift](plots/shift_coverage.png)", "",
             "Each cell: coverage (%, an abstention counting as covered) / answered right (%, a set that "
             "holds the class and is not an abstention) / mean size of the sets that are not abstentions:",
             "", *_table(frame), ""]
    detection = shift_summary(frame, "detect_auroc").drop(columns=[0], errors="ignore")
    if not detection.empty:
        best = detection.mean(axis=1).sort_values(ascending=False)
        lines += ["Shift detection AUROC (%) of each score, clean test images against the corrupted ones, "
                  "mean over severities: " + ", ".join(f"{METHOD_LABELS.get(m, m)} {100 * v:.1f}"
                                                      for m, v in best.items()) + ".", ""]
    return lines
