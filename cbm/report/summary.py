"""The report's first screen: one table of the run's headline numbers and a few sentences reading it.

:func:`summary_numbers` gathers them from whatever the run holds, with no head or score named in
advance beyond the report's main (FERL) head:

* the detector's concepts on test: mean per-concept AUROC and accuracy (:func:`cbm.detector.concept_metrics`);
* every head of ``metrics.json`` (``fit_head``), on the report's inputs: test accuracy, ECE and, for
  heads with credal sets, coverage, mean set size, abstention (all-class sets) and the accuracy on
  the inputs it does not abstain on, computed here from the saved head;
* held-out classes (an ``evaluate-openworld`` folder): the AUROC of the main head's novelty score
  (the kind its saved novelty threshold uses, the one ``predict`` flags with) beside the best
  baseline (a score of no FERL head);
* concept interventions (``interventions/curves.csv``): each fit-head head's test accuracy after
  ``k`` answered groups, with its best policy at that ``k``.

:func:`summary_section` lays them out as Markdown.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from cbm.detector import concept_metrics
from cbm.heads import FERLHead
from cbm.heads.operating import decide
from cbm.heads.tables import HEAD_LABELS
from cbm.report.run import RunView
from ferl.io.persist import current_folder

__all__ = ["INTERVENTION_K", "HeadRow", "SummaryNumbers", "novelty_kind", "summary_numbers",
           "summary_section"]

#: Answered concept groups of the summary's intervention column.
INTERVENTION_K = 3


@dataclass
class HeadRow:
    """One head's test numbers (fractions; None where the head has no such output).

    Attributes
    ----------
    name : str
        Registry name (``ferl-deep``, ``lr``, ...).
    accuracy, ece : float
    coverage, set_size, abstention, accepted_accuracy : float or None
        Credal-set coverage of the true class, mean set size, share of all-class sets and the
        accuracy on the inputs whose set is not every class (None: no credal sets, or every input
        abstained for ``accepted_accuracy``).
    intervened : tuple of (float, float, str) or None
        Accuracy with 0 and with `INTERVENTION_K` answered groups and the policy that gave the
        latter (the best at that k), from ``interventions/curves.csv``.
    """

    name: str
    accuracy: float
    ece: float
    coverage: float | None = None
    set_size: float | None = None
    abstention: float | None = None
    accepted_accuracy: float | None = None
    intervened: tuple[float, float, str] | None = None


@dataclass
class SummaryNumbers:
    """The numbers of the first screen (fractions).

    Attributes
    ----------
    inputs : str
        ``raw`` or ``calibrated``: which fit of each head.
    concept_auroc, concept_accuracy : float
        Mean per-concept AUROC and accuracy of the detector on the test split.
    novel_concept_accuracy : float or None
        The same accuracy on held-out-class images (None without a ``novel`` table).
    heads : list of HeadRow
    novelty : tuple of (str, float) or None
        Label and AUROC of the main head's novelty score on held-out classes.
    baseline : tuple of (str, float) or None
        Label and AUROC of the best baseline score.
    """

    inputs: str
    concept_auroc: float
    concept_accuracy: float
    novel_concept_accuracy: float | None
    heads: list[HeadRow] = field(default_factory=list)
    novelty: tuple[str, float] | None = None
    baseline: tuple[str, float] | None = None


def novelty_kind(run_dir: Path, head: str, inputs: str = "calibrated") -> str | None:
    """The OOD score kind of ``head``'s saved novelty threshold (``head.json``), or None."""
    folder = Path(run_dir) / "head" / head / inputs
    try:
        meta = json.loads((current_folder(folder) / "head.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    threshold = meta.get("ood_threshold")
    return threshold.get("kind") if isinstance(threshold, dict) else None


def _set_numbers(run: RunView, name: str, inputs: str) -> dict[str, float | None]:
    """Coverage, answered set size, abstention and accuracy when not abstaining of a saved FERL head at
    its operating point (`cbm.heads.operating.decide`, what ``predict`` answers); {} for other heads."""
    head = run.head(name, inputs)
    if not isinstance(head, FERLHead):
        return {}
    table = run.tables["test"]
    names = np.asarray(run.class_names)[table.y]
    keep = np.isin(names, head.classes_.astype(str))
    X, y = run.concepts("test", inputs)[keep], head.class_index(names[keep])
    features = None if table.feature_score is None else table.feature_score[keep]
    dec = decide(head, X, features)
    sets, abstain = dec.sets, dec.abstained
    right = np.argmax(dec.evidence.pignistic, axis=1) == y
    return {"coverage": float(sets[np.arange(len(y)), y].mean()),
            "set_size": float(sets[~abstain].sum(axis=1).mean()) if (~abstain).any() else None,
            "abstention": float(abstain.mean()),
            "accepted_accuracy": float(right[~abstain].mean()) if (~abstain).any() else None}


def _interventions(run_dir: Path, k: int) -> dict[str, tuple[float, float, str]]:
    """Head -> (accuracy at k=0, best accuracy at ``k``, its policy) of the sequential (fit-head's)
    heads on test, mean over runs; {} without ``interventions/curves.csv`` or without that k."""
    path = run_dir / "interventions" / "curves.csv"
    if not path.is_file():
        return {}
    frame = pd.read_csv(path)
    frame = frame[(frame["split"] == "test") & (frame["fit"] == "sequential")]
    mean = frame.groupby(["head", "policy", "k"], sort=False)["accuracy"].mean()
    out = {}
    for head in dict.fromkeys(frame["head"]):
        part = mean.loc[head]
        at_k = part.xs(k, level="k") if k in part.index.get_level_values("k") else None
        if at_k is None or at_k.empty or 0 not in part.index.get_level_values("k"):
            continue
        policy = str(at_k.idxmax())
        out[head] = (float(part.xs(0, level="k").mean()), float(at_k.max()), policy)
    return out


def _novelty(openworld: Path | None, head: str, kind: str | None):
    """(label, AUROC) of ``head:kind`` and of the best non-FERL score, mean over folds and seeds."""
    if openworld is None or not (openworld / "per_fold.csv").is_file():
        return None, None
    frame = pd.read_csv(openworld / "per_fold.csv")
    auroc = frame.groupby(["detector", "label"], sort=False)["auroc"].mean().reset_index()
    ferl = auroc[auroc["detector"] == f"{head}:{kind}"]
    if ferl.empty:  # the run's threshold kind was not evaluated: the head's first score
        ferl = auroc[auroc["detector"].str.startswith(f"{head}:")].head(1)
    base = auroc[~auroc["detector"].str.startswith("ferl")]
    mine = None if ferl.empty else (str(ferl["label"].iloc[0]), float(ferl["auroc"].iloc[0]))
    if base.empty:
        return mine, None
    top = base.sort_values("auroc", ascending=False, kind="stable").iloc[0]
    return mine, (str(top["label"]), float(top["auroc"]))


def summary_numbers(run: RunView, head: str = "ferl-deep", inputs: str = "calibrated",
                    openworld: Path | None = None) -> SummaryNumbers:
    """Gather the first screen's numbers from a run (see the module docstring).

    Raises
    ------
    ValueError
        The run has no test concept table.
    """
    if "test" not in run.tables:
        raise ValueError(f"{run.run_dir} has no test concept table (concepts/test.npz)")
    test = concept_metrics(run.tables["test"].probs, run.tables["test"].concept_labels)
    novel = run.tables.get("novel")
    out = SummaryNumbers(
        inputs=inputs, concept_auroc=float(test["auroc"]), concept_accuracy=float(test["concept_acc"]),
        novel_concept_accuracy=(float(concept_metrics(novel.probs, novel.concept_labels)["concept_acc"])
                                if novel is not None and novel.n_samples else None))
    intervened = _interventions(run.run_dir, INTERVENTION_K)
    for name, by_input in run.metrics.get("fit_head", {}).get("heads", {}).items():
        m = by_input.get(inputs)
        if m is None:
            continue
        row = HeadRow(name, float(m["accuracy"]), float(m["ece"]), intervened=intervened.get(name))
        if "coverage" in m and (run.run_dir / "head" / name / inputs).is_dir():
            for key, value in _set_numbers(run, name, inputs).items():
                setattr(row, key, value)
        out.heads.append(row)
    out.novelty, out.baseline = _novelty(openworld, head, novelty_kind(run.run_dir, head, inputs))
    return out


def _pct(value: float | None, digits: int = 1) -> str:
    return "–" if value is None or math.isnan(value) else f"{100 * value:.{digits}f}"


def _gain(row: HeadRow) -> str:
    if row.intervened is None:
        return "–"
    before, after, policy = row.intervened
    return f"{100 * (after - before):+.1f} ({policy})"


def _reading(s: SummaryNumbers, main: str) -> list[str]:
    """A few sentences that read the table."""
    label = HEAD_LABELS.get(main, main)
    quality = "separate well" if s.concept_auroc >= 0.9 else "separate only partly"
    sentences = [f"The detector's concepts {quality} on test (mean concept AUROC {_pct(s.concept_auroc)} %"
                 + (f"; accuracy {_pct(s.concept_accuracy)} % on test, {_pct(s.novel_concept_accuracy)} % "
                    "on held-out-class images)." if s.novel_concept_accuracy is not None else ").")]
    if s.heads:
        top = max(r.accuracy for r in s.heads)
        best = [HEAD_LABELS.get(r.name, r.name) for r in s.heads if _pct(r.accuracy) == _pct(top)]
        low = min(r.accuracy for r in s.heads)
        lead = (f"{best[0]} is the most accurate head" if len(best) == 1 else
                f"{', '.join(best[:-1])} and {best[-1]} tie as the most accurate heads")
        sentences.append(f"{lead} ({_pct(top)} %)" + (f"; the heads span {_pct(low)}–{_pct(top)} %."
                                                      if _pct(low) != _pct(top) else "."))
    row = next((r for r in s.heads if r.name == main), None)
    if row is not None and row.abstention is not None:
        if row.abstention > 0 and row.accepted_accuracy is not None:
            better = row.accepted_accuracy > row.accuracy
            verdict = ("." if row.accuracy >= 1.0 else  # no error to pick out
                       ", so its doubt falls where its errors are." if better else
                       ", so its doubt does not pick out its errors.")
            sentences.append(
                f"{label} abstains on {_pct(row.abstention)} % of the test images; on the rest it is "
                f"{_pct(row.accepted_accuracy)} % accurate against {_pct(row.accuracy)} % overall{verdict}")
        else:
            sentences.append(f"{label} abstains on no test image; its credal sets hold {row.set_size:.2f} "
                             f"classes on average and contain the true class {_pct(row.coverage)} % of the "
                             "time.")
    if s.novelty is not None and s.baseline is not None:
        ahead = s.novelty[1] - s.baseline[1]
        sentences.append(f"On classes never trained on, {s.novelty[0]} reaches AUROC {_pct(s.novelty[1])} "
                         f"against {_pct(s.baseline[1])} for the best baseline ({s.baseline[0]}), "
                         f"{abs(100 * ahead):.1f} points {'ahead' if ahead >= 0 else 'behind'}.")
    gains = [r for r in s.heads if r.intervened is not None]
    if gains:
        parts = [f"{HEAD_LABELS.get(r.name, r.name)} {_pct(r.intervened[0])} → {_pct(r.intervened[1])} %"
                 for r in gains]
        sentences.append(f"An expert answering {INTERVENTION_K} concept groups per image moves "
                         f"{', '.join(parts)} (best policy each).")
    return [" ".join(sentences)]


def summary_section(s: SummaryNumbers, main: str = "ferl-deep") -> list[str]:
    """The first screen's Markdown lines: a heads table, the concept / novelty line and the reading."""
    rows = ["| head | accuracy | ECE | coverage | set size | abstains | accuracy when not abstaining | "
            f"gain from {INTERVENTION_K} answered groups (policy) |",
            "|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in s.heads:
        name = HEAD_LABELS.get(r.name, r.name)
        name = f"**{name}**" if r.name == main else name
        size = "–" if r.set_size is None else f"{r.set_size:.2f}"
        rows.append(f"| {name} | {_pct(r.accuracy)} | {_pct(r.ece)} | {_pct(r.coverage)} | {size} | "
                    f"{_pct(r.abstention)} | {_pct(r.accepted_accuracy)} | {_gain(r)} |")
    novelty = ("not run (`evaluate-openworld`)" if s.novelty is None else
               f"{s.novelty[0]} AUROC **{_pct(s.novelty[1])}**"
               + ("" if s.baseline is None else f", best baseline {s.baseline[0]} {_pct(s.baseline[1])}"))
    return [
        "## Summary", "",
        f"Test split, heads on {s.inputs} concepts; rates in %. Concepts: mean AUROC "
        f"**{_pct(s.concept_auroc)}**, accuracy {_pct(s.concept_accuracy)}. Held-out classes: {novelty}.", "",
        *rows, "",
        "Coverage: share of credal sets holding the true class (an abstention holds every class); "
        "abstains: share of images whose FERL set is wider than the operating point's largest set "
        "(`fit-head --max-set-size`, `cbm.heads.operating`), the set `predict` answers with. "
        f"Gain: accuracy after an expert answers {INTERVENTION_K} concept groups minus before.", "",
        *_reading(s, main), "",
    ]
