"""The run report: ``report.md`` with figures, built from a finished run directory.

:func:`build_report` reads a run written by ``train-detector`` + ``fit-head`` (and, optionally,
an ``evaluate-openworld`` output folder) and writes, atomically::

    <run>/report.md              a summary first (cbm.report.summary: the table and its reading),
                                 then concept accuracy, heads (raw vs calibrated), curves, open world
                                 (cbm.report.openworld), concept interventions (from
                                 ``interventions/``, when run), the certified radius over the test
                                 split (cbm.report.robustness), three example explanations (top
                                 classes and rules, cbm.report.explanation), the FERL rules of
                                 largest support and the tree; an appendix with FERL's other novelty
                                 scores and the commands and timings of the run
    <run>/plots/{concept_accuracy,heads,tree,openworld_roc}.png
    <run>/plots/{training_curves,risk_coverage,reliability,confusion}.png   (cbm.report.curves)
    <run>/examples/<kind>.png    the example's input image (enlarged)
    <run>/examples/<kind>_evidence.png   image, belief / plausibility / ignorance, attributes

Tables come from :mod:`cbm.heads.tables` (heads, paper Table 4 layout) and
:mod:`cbm.openworld.report` (Table 5 layout); examples are chosen by
:func:`cbm.report.examples.choose_and_explain`. The report stays under 400 lines whatever the
number of classes: examples list `TOP` classes and rules, the rules section `RULES_SHOWN` rules.
Command line::

    python -m cbm.report runs/<name> [--head ferl-deep] [--inputs calibrated] [--openworld DIR]
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from jsonargparse import ArgumentParser

from cbm.detector import concept_metrics
from cbm.heads.tables import HEAD_LABELS, heads_markdown
from cbm.jobs import console_main, phase
from cbm.report.curves import curves_section
from cbm.report.examples import EXAMPLE_KINDS, Example, choose_and_explain
from cbm.report.explanation import short_markdown, sufficient_section
from cbm.report.interventions import interventions_section
from cbm.report.openworld import openworld_sections
from cbm.report.plots import (
    concept_accuracy_figure,
    evidence_figure,
    figure_png,
    heads_figure,
    image_png,
    tree_figure,
)
from cbm.report.robustness import robustness_section
from cbm.report.run import RunView, load_run
from cbm.report.shift import shift_section
from cbm.report.summary import novelty_kind, summary_numbers, summary_section
from cbm.runtime import add_threads_argument, set_threads
from ferl.io.persist import StepWriter, atomic_write_bytes, current_folder
from ferl.rules import format_rules

__all__ = ["build_report", "demote_headings", "report_main", "report_parser"]

#: Section titles of the examples, by kind.
EXAMPLE_TITLES = {
    "confident": "A confident prediction",
    "two-class": "A two-class credal set",
    "novel": "A held-out-class image (an abstention where there is one) and its anomalous attributes",
}


#: Classes and fired rules listed per example; rules listed in the rules section.
TOP = 5
RULES_SHOWN = 12
#: A tree of more rules is drawn down to `TREE_DEPTH` only (the figure stays readable).
TREE_RULES = 40
TREE_DEPTH = 4


def demote_headings(markdown: str, levels: int = 1) -> str:
    """Add ``levels`` ``#`` to every Markdown heading (to embed one report in another)."""
    return re.sub(r"^(#{1,6}) ", lambda m: "#" * (len(m.group(1)) + levels) + " ", markdown, flags=re.M)


def _pct(value: float) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{100 * value:.2f}"


def _detector_section(run: RunView) -> list[str]:
    rows = ["| split | n | concept accuracy (%) | concept error (%) | mean concept AUROC (%) |",
            "|---|---:|---:|---:|---:|"]
    for split, table in run.tables.items():
        m = concept_metrics(table.probs, table.concept_labels)
        rows.append(f"| {split} | {table.n_samples} | {_pct(m['concept_acc'])} | "
                    f"{_pct(m['concept_error'])} | {_pct(m['auroc'])} |")
    det = run.detector_metrics
    trained = (f"Trained {det['epochs']} epoch(s), {det['global_step']} steps in {det['fit_seconds']:.0f} s; "
               f"tables from the checkpoint with the best `{det['monitor']}`. " if det else "")
    data = run.config.get("data", {}) if isinstance(run.config.get("data"), dict) else {}
    model = run.config.get("model", {}) if isinstance(run.config.get("model"), dict) else {}
    return [
        "## Concept detector", "",
        f"Dataset `{data.get('dataset', '?')}`, backbone `{model.get('backbone', '?')}`, "
        f"{len(run.concept_names)} concepts, {len(run.class_names)} classes "
        f"({np.unique(run.tables['train'].y).size} in training). {trained}"
        "Accuracy thresholds the detector's raw probabilities at 0.5; `novel` holds images of classes "
        "never used in training.", "", *rows, "",
        "![per-concept accuracy](plots/concept_accuracy.png)", "",
    ]


def _heads_section(run: RunView) -> list[str]:
    entry = run.metrics.get("fit_head")
    if not entry:
        return ["## Heads", "", "No `fit_head` entry in `metrics.json`: run `fit-head --run` first.", ""]
    body = demote_headings(heads_markdown(entry)).split("\n", 1)[1]  # drop the embedded title
    return ["## Heads on raw vs calibrated concepts (paper Table 4 layout)", body, "",
            "![heads](plots/heads.png)", ""]


def _example_section(kind: str, ex: Example | None, main_head: str, written: dict[str, bytes]) -> list[str]:
    lines = [f"### {EXAMPLE_TITLES[kind]}", ""]
    if ex is None:
        what = {"two-class": "No test or held-out image has a credal set of exactly two classes under any "
                             "FERL head of this run, so there is no such example to show.",
                "confident": "No test image is correctly predicted with a one-class credal set.",
                "novel": "No test or held-out image to show."}[kind]
        return lines + [what, ""]
    head = HEAD_LABELS.get(ex.head, ex.head)
    lines += [f"`{ex.sample_id}` from the {ex.pick.split} split, true class **{ex.true_class}**: "
              f"{ex.pick.reason}, explained by {head}.", ""]
    if ex.head != main_head:
        main = HEAD_LABELS.get(main_head, main_head)
        lines += [f"{main} gives no credal set of exactly two classes on the test or held-out images of this "
                  f"run, so this example comes from {head}.", ""]
    if ex.image is not None:
        written[f"examples/{kind}.png"] = image_png(ex.image)
        lines += [f"![{ex.sample_id}](examples/{kind}.png)", ""]
    written[f"examples/{kind}_evidence.png"] = figure_png(
        evidence_figure(ex.explanation, ex.image, f"{ex.sample_id} (true class {ex.true_class})", ex.truth))
    truth = ex.true_class if ex.true_class in [str(c) for c in ex.explanation.classes] else None
    lines += [f"![evidence of {ex.sample_id}](examples/{kind}_evidence.png)", "",
              short_markdown(ex.explanation, TOP, truth), ""]
    lines += [f"The evidence's reliability at the operating point: r(x) = {ex.explanation.reliability:.3f} "
              "(1 for an image as typical of the training images as the clean val ones; the credal set "
              "widens as r falls under shift).", ""]
    if ex.threshold is not None:
        decision = "**rejected as novel**" if ex.ood_score > ex.threshold else "accepted"
        lines += [f"{ex.explanation.ood_kind} OOD score {ex.ood_score:.3g} vs threshold {ex.threshold:.3g} "
                  f"(accepts 95 % of the val images, as `predict` flags): {decision}.", ""]
    if ex.truth is not None:
        named = [a.name for a in ex.explanation.anomalous_features]
        hits = [n for n in named if n in ex.truth]
        lines += [f"Class {ex.true_class} was never seen in training; its nearest training class is "
                  f"{', '.join(ex.nearest)}, from which it differs in {', '.join(ex.truth) or 'no concept'}. "
                  f"Of FERL's top {len(named)} anomalous attributes, {len(hits)} "
                  f"{'is' if len(hits) == 1 else 'are'} among these"
                  + (f" ({', '.join(hits)})." if hits else "."), ""]
    return lines


def _set_rule(head) -> str:
    """How the examples' credal sets are read, as `cbm.heads.operating.decide` reads them."""
    coverage = getattr(head, "coverage_", None)
    if coverage is not None and getattr(head, "operating_", None) is not None:
        return ("the credal set is the run's operating point's: every class whose plausibility clears the "
                f"threshold that gave {100 * coverage:.0f} % coverage on the val images, lowered as the "
                "image looks shifted; an abstention is a set of every class, or of more classes than the "
                "operating point allows")
    if coverage is not None:
        return (f"the credal set holds every class whose plausibility clears the threshold that gave "
                f"{100 * coverage:.0f} % coverage on the val images; an abstention is a set of every class")
    return ("the credal set holds every class whose plausibility reaches the largest belief (interval "
            "dominance); an abstention is a set of every class")


def build_report(
    run_dir: str | os.PathLike,
    *,
    head: str = "ferl-deep",
    inputs: str = "calibrated",
    openworld: str | os.PathLike | None = None,
    shift: str | os.PathLike | None = None,
    title: str | None = None,
    commands: Sequence[str] = (),
    timings: Mapping[str, float] | None = None,
) -> Path:
    """Write ``report.md``, its plots and example images into a run directory.

    Parameters
    ----------
    run_dir : path-like
        A run with ``concepts/``, ``calibration.json``, ``head/`` and ``metrics.json``.
    head : str
        FERL head whose rules, tree and examples are shown (``ferl-compact|medium|deep``).
    inputs : {"raw", "calibrated"}
        Which of the head's two fits to show.
    openworld : path-like, optional
        An ``evaluate-openworld`` output folder whose report is embedded.
    shift : path-like, optional
        An ``evaluate-shift`` output folder whose tables and figure are embedded
        (:func:`cbm.report.shift.shift_section`).
    title : str, optional
        Report title (default: the run folder's name).
    commands : sequence of str
        Shell commands that produced the run, listed at the top.
    timings : mapping of str to float, optional
        Wall seconds per step, listed at the top.

    Returns
    -------
    Path
        The written ``report.md``.

    Raises
    ------
    FileNotFoundError
        Not a run directory, the head is missing (run ``fit-head`` first), or the run has no test
        concept table with rows (``concepts/test.npz``, where the examples come from).
    ValueError
        ``head`` is not a FERL head, or invalid run files.
    """
    run_dir = Path(run_dir)
    run = load_run(run_dir)
    model = run.head(head, inputs)
    rules = current_folder(run_dir / "head" / head / inputs).relative_to(run_dir).as_posix() + "/rules.md"
    examples = choose_and_explain(run, head, inputs)
    written: dict[str, bytes] = {}
    ow = None if openworld is None else Path(openworld)
    label = HEAD_LABELS.get(head, head)
    numbers = summary_numbers(run, head, inputs, ow)
    lines = [f"# {title or f'Run report: {run_dir.name}'}", "",
             f"Run directory `{run_dir}`; every head reads {inputs} concept probabilities; examples, rules "
             f"and tree: {label}. How the run was made: [the appendix](#how-this-run-was-made).", "",
             *summary_section(numbers, head)]
    written["plots/concept_accuracy.png"] = figure_png(concept_accuracy_figure(run.tables))
    lines += _detector_section(run)
    if "fit_head" in run.metrics:
        written["plots/heads.png"] = figure_png(heads_figure(run.metrics["fit_head"]))
    lines += _heads_section(run)
    lines += curves_section(run, model, head, inputs, written)
    kind = novelty_kind(run_dir, head, inputs)
    openworld_lines, appendix = openworld_sections(run_dir, ow, head, kind, written)
    lines += openworld_lines
    lines += shift_section(shift, written, run_dir)
    lines += interventions_section(run_dir)
    lines += robustness_section(run, model, label, inputs)
    lines += ["## Example explanations", "",
              "Chosen from the test and held-out (`novel`) images by FERL's evidential outputs. Belief "
              "Bel(c) = m({c}), plausibility Pl(c) the mass of every focal set that holds c; "
              f"{_set_rule(model)}. Each table lists the {TOP} most probable classes (and the true one) "
              f"and the {TOP} rules that fired most.", "",
              *sufficient_section(model.model_, run.concepts("test", inputs), label)]
    for kind in EXAMPLE_KINDS:
        lines += _example_section(kind, examples[kind], head, written)
    depth = None if model.model_.n_rules_ <= TREE_RULES else TREE_DEPTH
    written["plots/tree.png"] = figure_png(tree_figure(model.model_, max_depth=depth), dpi=90)
    shown = sorted(model.model_.rules_, key=lambda r: -r.support)[:RULES_SHOWN]
    lines += [f"## Rules of {label} ({inputs} inputs)", "",
              f"{model.model_.n_rules_} rules over {model.size()['concepts_used']} concepts; the "
              f"{len(shown)} of largest support below, every rule in [{rules}]({rules}).", "",
              "![FERL tree](plots/tree.png)", "",
              *([f"The figure shows the tree's top {TREE_DEPTH} levels; grey boxes count the rules below.",
                 ""] if depth else []),
              format_rules(shown, 2, "markdown"), ""]
    lines += ["## Appendix", "", *appendix, "### How this run was made", ""]
    if commands:
        lines += ["```", *commands, "```", ""]
    if timings:
        lines += ["Wall time: " + ", ".join(f"{k} {v:.0f} s" for k, v in timings.items())
                  + f" (total {sum(timings.values()):.0f} s).", ""]
    extra = ('' if ow is None else f' --openworld {ow}') + ('' if shift is None else f' --shift {shift}')
    lines += [f"Rebuild this report from the finished run: `python -m cbm.report {run_dir}{extra}`.", ""]
    with StepWriter(run_dir) as step:  # the figures and report.md are replaced together
        for rel, data in written.items():
            atomic_write_bytes(step.path(run_dir / rel), data)
        step.write_text(run_dir / "report.md", "\n".join(lines).rstrip() + "\n")
    for stale in (run_dir / "examples").glob("*.png"):  # left by an earlier report of this run
        if f"examples/{stale.name}" not in written:
            stale.unlink()
    return run_dir / "report.md"


def report_parser() -> ArgumentParser:
    """The ``python -m cbm.report`` argument parser."""
    p = ArgumentParser(prog="python -m cbm.report", description="Write report.md for a run directory.")
    p.add_argument("run_dir", type=str, help="run directory (train-detector + fit-head)")
    p.add_argument("--head", type=str, default="ferl-deep", help="FERL head of the examples and rules")
    p.add_argument("--inputs", type=str, default="calibrated", help="raw | calibrated")
    p.add_argument("--openworld", type=str | None, default=None, help="evaluate-openworld output to embed")
    p.add_argument("--shift", type=str | None, default=None, help="evaluate-shift output to embed")
    p.add_argument("--title", type=str | None, default=None, help="report title")
    add_threads_argument(p)
    return p


def report_main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``python -m cbm.report``; bad input and file errors end with one
    ``report: error: <message>`` line (status 1), SIGTERM / SIGINT with one line saying what was
    kept (:func:`cbm.jobs.console_main`)."""
    cfg = report_parser().parse_args(argv)

    def job() -> Path:
        set_threads(cfg.threads)
        with phase("building the report", f"{cfg.run_dir} keeps its previous report.md and figures (they "
                   "are replaced together, at the end)"):
            return build_report(cfg.run_dir, head=cfg.head, inputs=cfg.inputs, openworld=cfg.openworld,
                                shift=cfg.shift, title=cfg.title)

    print(f"report: {console_main('report', job)}")

