"""Files ``predict`` writes: the table (CSV and/or JSON Lines) and a Markdown page of explanations.

::

    <out>/predictions.csv     one row per input (sets as ``a|b``, attributes as ``name (score); ...``)
    <out>/predictions.jsonl   the same rows as JSON objects (sets and attributes as lists)
    <out>/predictions.md      summary table, then per input: the image beside its evidence figure
                              (:func:`cbm.report.plots.evidence_figure`) and the explanation
    <out>/predictions/<n>.png the figures of the page
    <out>/.predict.json       the list of the files above that the last ``predict`` wrote

:func:`write_predictions` replaces the whole output at once (one :class:`ferl.io.persist.StepWriter`
commit, holding ``<out>``'s write lock): a kill leaves the previous output or the new one, never a
mix. Files of the previous output that the new one does not have (figures of a longer page, a
table format not asked for again) are removed in the same commit; no other file of ``<out>`` is
touched, and a file of the user's at a name the new output needs stops the job before anything is
written.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cbm.data.common import UnreadableImageError
from cbm.predict.inputs import read_image
from cbm.predict.pipeline import Predictions, flat_row
from cbm.report.explanation import radius_sentence
from cbm.report.plots import evidence_figure, figure_png
from ferl.io.persist import StepWriter, atomic_write_bytes

__all__ = ["FORMATS", "MANIFEST", "page_files", "table_texts", "write_predictions"]

#: Table formats: file suffix per format name.
FORMATS = {"csv": ".csv", "jsonl": ".jsonl"}
FIGURES = "predictions"
#: The list of the files the last ``predict`` wrote into its output folder.
MANIFEST = ".predict.json"
#: Shorter side an input image is decoded to for the page, at least (its panel is about 340 px wide).
PAGE_IMAGE_SIDE = 256
#: Names ``predict`` writes (relative to the output folder); a manifest naming others is not trusted.
_OWN = re.compile(r"predictions\.(csv|jsonl|md)|predictions/[1-9][0-9]*\.png")


def table_texts(pred: Predictions, formats: Sequence[str] = ("csv", "jsonl"),
                stem: str = "predictions") -> dict[str, str]:
    """The table as ``{"<stem>.csv": text, "<stem>.jsonl": text}`` (the formats asked for).

    Raises
    ------
    ValueError
        An unknown format (the known ones are listed).
    """
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise ValueError(f"unknown table format(s) {bad or 'none'}; choose from {list(FORMATS)}")
    texts = {}
    if "csv" in formats:
        texts[f"{stem}.csv"] = pred.frame().to_csv(index=False)
    if "jsonl" in formats:
        texts[f"{stem}.jsonl"] = "\n".join(json.dumps(r, ensure_ascii=False) for r in pred.rows) + "\n"
    return texts


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
    kind = pred.threshold["kind"]
    lines = ["| # | " + " | ".join(f"{kind} OOD score" if c == "ood_score" else c.replace("_", " ")
                                   for c in cols) + " |",
             "|---:|" + "---|" * len(cols)]
    for i, r in enumerate(pred.rows):
        flat = flat_row(r)
        lines.append(f"| {i + 1} | " + " | ".join(_cell(flat[c], c) for c in cols) + " |")
    return lines


def page_files(pred: Predictions, *, title: str = "Predictions", limit: int = 100,
               header: Sequence[str] = ()) -> tuple[str, dict[str, bytes]]:
    """The page ``predictions.md``: a summary table, then each of the first ``limit`` inputs explained.

    Each explained input shows its evidence figure (the image, belief / plausibility / ignorance per
    class, the anomalous attributes), its OOD decision, its certified radius in concept units
    (:func:`cbm.report.explanation.radius_sentence` of :func:`cbm.heads.operating.certified_radius`)
    and :meth:`ferl.explain.Explanation.to_markdown` (fired rules with their masses), after its row's
    warning when it has one. Unreadable inputs are listed with the reason.

    Parameters
    ----------
    pred : Predictions
    title : str
    limit : int
        Inputs explained in full (all of them stay in the summary table).
    header : sequence of str
        Markdown lines placed under the title (run, head, threshold ...).

    Returns
    -------
    text : str
        The page's Markdown.
    figures : dict of str to bytes
        PNG figures by their path relative to the output folder (``predictions/<n>.png``).
    """
    t = pred.threshold
    lines = [f"# {title}", "", *header, "",
             f"An input is flagged as novel (`ood flag`) when its {t['kind']} OOD score exceeds "
             f"{t['value']:.4g}, the score that accepts {100 * t['accept']:.0f} % of the run's "
             f"{t['fitted_on']} images. The table's `set` is the head's credal set (coverage-targeted when "
             "fit-head calibrated one); each input's explanation below shows the paper's "
             "interval-dominance set, which can differ from it. An input's certified radius is in the "
             "units of the concept probabilities the head reads (calibrated when it reads calibrated "
             "ones).", "", *_summary(pred), ""]
    figures = {}
    for i, row in enumerate(pred.rows[:limit]):
        lines += [f"## {i + 1}. `{row['input']}`", ""]
        if row["error"] is not None:
            lines += [f"Not predicted: {row['error']}", ""]
            continue
        try:
            image = None if pred.inputs[i] is None else read_image(pred.inputs[i], PAGE_IMAGE_SIDE)
        except UnreadableImageError:  # removed since it was predicted
            image = None
        if row["warning"] is not None:
            lines += [f"**Warning**: {row['warning']}.", ""]
        ex = pred.explain(i)
        name = f"{FIGURES}/{i + 1}.png"
        figure = evidence_figure(ex, image, str(row["input"]))  # laid out with tight_layout
        figures[name] = figure_png(figure, dpi=80, tight=False)
        decision = "**flagged as novel**" if row["ood_flag"] else "within the training distribution"
        lines += [f"![evidence of {row['input']}]({name})", "",
                  f"{row['ood_kind']} OOD score {row['ood_score']:.4g} vs threshold "
                  f"{row['ood_threshold']:.4g}: {decision}.",
                  "", radius_sentence(ex.robustness_radius, row["class"]), "",
                  ex.to_markdown(), ""]
    if len(pred.rows) > limit:
        lines += [f"The other {len(pred.rows) - limit} inputs are in the table only (`--page-limit`).", ""]
    return "\n".join(lines).rstrip() + "\n", figures


def _previous_files(out: Path) -> set[str]:
    """The files of ``out`` that an earlier ``predict`` wrote (relative names).

    From ``.predict.json``; for an output written before it existed (or a damaged one): the table
    and page names that exist and the figures the page links to. Only names ``predict`` writes count.
    """
    try:
        listed = json.loads((out / MANIFEST).read_text())["files"]
        if not isinstance(listed, list):
            raise TypeError
    except (OSError, ValueError, KeyError, TypeError):
        listed = [f"predictions{s}" for s in (*FORMATS.values(), ".md")
                  if (out / f"predictions{s}").is_file()]
        if (out / "predictions.md").is_file():
            text = (out / "predictions.md").read_text(errors="replace")
            listed += re.findall(rf"\]\(({FIGURES}/[0-9]+\.png)\)", text)
    return {f for f in listed if isinstance(f, str) and _OWN.fullmatch(f)}


def write_predictions(pred: Predictions, out: str | os.PathLike, *, formats: Sequence[str] = ("csv", "jsonl"),
                      page: bool = True, title: str = "Predictions", limit: int = 100,
                      header: Sequence[str] = ()) -> list[Path]:
    """Replace the output of ``predict`` in folder ``out`` by this one, as a whole.

    The table (:func:`table_texts`), the page and its figures (:func:`page_files`, when ``page``)
    and the manifest ``.predict.json`` are staged, then committed at once with the files of the
    previous output that this one lacks removed (see the module docstring); everything else in
    ``out`` stays.

    Returns
    -------
    list of Path
        The table files, then the page (when written).

    Raises
    ------
    ValueError
        No input was predicted (``out`` is left unchanged; the first reasons are named), an unknown
        table format, ``out`` is a file, or a file ``predict`` would write exists in ``out`` and
        was not written by an earlier ``predict``.
    FolderBusyError
        Another process is writing ``out``.
    """
    out = Path(out)
    errors = [r["error"] for r in pred.rows if r["error"] is not None]
    if len(errors) == len(pred.rows):
        reasons = "; ".join(errors[:3]) + ("; ..." if len(errors) > 3 else "")
        raise ValueError(f"none of the {len(pred.rows)} inputs could be read ({reasons or 'no input'}); "
                         f"{out} is unchanged")
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file, not a folder")
    texts = table_texts(pred, formats)
    figures: dict[str, bytes] = {}
    if page:
        texts["predictions.md"], figures = page_files(pred, title=title, limit=limit, header=header)
    new = [*texts, *figures]
    with StepWriter(out) as step:
        previous = _previous_files(out)
        foreign = [name for name in new if (out / name).exists() and name not in previous]
        if foreign:
            raise ValueError(f"{out / foreign[0]} exists and was not written by predict ({len(foreign)} "
                             "such file(s) where predict writes): move them, or choose another --out")
        for name, text in texts.items():
            step.write_text(out / name, text)
        for name, data in figures.items():
            atomic_write_bytes(step.path(out / name), data)
        for name in sorted(previous - set(new)):
            step.remove(out / name)
        step.write_text(out / MANIFEST, json.dumps({"files": new}, indent=1) + "\n")
    return [out / name for name in texts]
