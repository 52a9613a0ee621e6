"""Tables, ROC curves and example explanations of the open-world protocol (paper Table 5).

Values are averaged over the folds of each seed, then shown as mean ± std over seeds (std needs
two or more seeds; "–" otherwise), rates on the paper's 0-100 scale. The paper's values are printed
beside ours where the dataset matches. Our copy of the paper gives Table 5's caption but not its
cells; the values quoted in §5.2's text are the only ones used (:data:`PAPER_TABLE5`,
:data:`PAPER_NOTES`). The paper's FERL row is its "native residual" score (``ferl-deep:residual``),
an ablation kind here (`ferl.benchmarks.ood_kinds`). The report leads with each FERL head's own
score, the kind ``predict`` flags with (:func:`lead_detectors`), and the baselines; FERL's other
scores go to an appendix table.
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from sklearn.metrics import roc_curve

from cbm.heads.tables import HEAD_LABELS
from cbm.openworld.curves import curve_figures, curves_markdown
from ferl.benchmarks.ood import DETECTORS
from ferl.benchmarks.tables import markdown_table
from ferl.io.persist import atomic_write_bytes, atomic_write_text

__all__ = [
    "FOLD_DIR",
    "OOD_METRICS",
    "PAPER_NOTES",
    "PAPER_TABLE5",
    "detector_label",
    "examples_markdown",
    "heads_frame",
    "heads_markdown",
    "lead_detectors",
    "per_fold_frame",
    "roc_png",
    "seed_summary",
    "table5_markdown",
    "write_report",
]

#: A fold's folder below the output folder.
FOLD_DIR = "seed{seed}/fold{fold}"
#: Table 5 columns: (key, header, higher is better).
OOD_METRICS = (("auroc", "AUROC ↑", True), ("aupr_out", "AUPR-Out ↑", True), ("fpr95", "FPR95 ↓", False),
               ("reject", "Reject ↑", True))
#: The paper's Table 5 values (0-100) quoted in §5.2's text, by dataset and score.
PAPER_TABLE5: dict[str, dict[str, dict[str, float]]] = {
    "cub200": {"ferl-deep:residual": {"auroc": 68.2, "aupr_out": 31.0}},
    "awa2": {"ferl-deep:residual": {"auroc": 86.2, "aupr_out": 68.3, "fpr95": 75.8, "reject": 57.2},
             "knn": {"auroc": 88.2}},
}
#: What §5.2 says about cells it does not attribute to one detector.
PAPER_NOTES = {
    "cub200": "Paper, CUB-200 (ResNet-50 at 224 px): FERL 68.2 AUROC and 31.0 AUPR-Out; the strongest "
              "dedicated detector reaches 70.5 and 33.4 (FERL is 2.3 / 2.4 below; the text does not "
              "name it).",
    "awa2": "Paper, AwA2 (ResNet-50 on AwA2 images): kNN 88.2 AUROC (FERL 2.0 below); FERL has the best "
            "AUPR-Out (68.3) and rejection (57.2 %); FPR95 of Mahalanobis and kNN is 54.2-54.3 "
            "(not said which is which).",
}
DASH = "–"


def detector_label(name: str) -> str:
    """Printed name: ``FERL-deep (residual)`` for ``ferl-deep:residual``, the detector's label else."""
    head, _, kind = name.partition(":")
    if kind:
        return f"{HEAD_LABELS.get(head, head)} ({kind})"
    return DETECTORS[name][0] if name in DETECTORS else name


def lead_detectors(results: Sequence[dict], detectors: Sequence[str]) -> list[str]:
    """The scores a report leads with: each FERL head's own kind (``heads.<h>.ood_kind`` of the fold
    results, the kind ``predict`` flags with; a head without one: its first score) and the
    baselines, in the order of ``detectors``; the other FERL scores belong in an appendix."""
    own = {f"{h}:{m['ood_kind']}" for r in results for h, m in r["heads"].items() if "ood_kind" in m}
    heads = {d.partition(":")[0] for d in detectors if ":" in d}
    own |= {next(d for d in detectors if d.startswith(f"{h}:")) for h in heads
            if not any(o.startswith(f"{h}:") for o in own)}
    return [d for d in detectors if ":" not in d or d in own]


def per_fold_frame(results: Sequence[dict]) -> pd.DataFrame:
    """One row per (seed, fold, score): ``auroc, aupr_out, fpr95, reject, accept_id, threshold``
    (fractions) and the retained / held-out test counts."""
    rows = [{"seed": r["seed"], "fold": r["fold"], "detector": d, "label": detector_label(d), **m,
             "n_id": r["n"]["test"], "n_ood": r["n"]["novel"], "held_out": " ".join(r["held_out_names"])}
            for r in results for d, m in r["ood"].items()]
    return pd.DataFrame(rows)


#: The operating-point rates of a head on retained (test) and held-out (novel) images.
RATES = ("abstain", "flag", "caught", "shift_flag")


def heads_frame(results: Sequence[dict]) -> pd.DataFrame:
    """One row per (seed, fold, FERL head): retained-test accuracy, the operating point's rates on
    retained and held-out test images (abstention, novelty flag, either: caught, shift flag), each
    baseline's catch of held-out images when it flags as many retained ones as the head catches,
    rules, attribute-naming precision@k and its chance level."""
    rows = [{"seed": r["seed"], "fold": r["fold"], "head": h, "accuracy": m["accuracy"],
             **{f"{rate}_{p}": m[f"{rate}_{p}"] for rate in RATES for p in ("test", "novel")},
             **{f"at_operating_point:{b}": v for b, v in m.get("baselines_at_operating_point", {}).items()},
             "rules": m["size"]["rules"], "concepts_used": m["size"]["concepts_used"], **m["naming"]}
            for r in results for h, m in r["heads"].items()]
    return pd.DataFrame(rows)


def seed_summary(frame: pd.DataFrame, key: str, metrics: Sequence[str]) -> pd.DataFrame:
    """Fold means within each seed, then mean, std (ddof 1) and seed count per ``key``.

    Returns a long frame with columns ``key, metric, mean, std, n_seeds, n_folds``.
    """
    per_seed = frame.groupby(["seed", key], sort=False)[list(metrics)].mean()
    folds = frame.groupby(key, sort=False)["fold"].nunique()
    out = []
    for name, grp in per_seed.groupby(level=key, sort=False):
        for m in metrics:
            out.append({key: name, "metric": m, "mean": grp[m].mean(), "std": grp[m].std(ddof=1),
                        "n_seeds": len(grp), "n_folds": int(folds[name])})
    return pd.DataFrame(out)


def _cell(mean: float, std: float, scale: float = 100.0, digits: int = 1) -> str:
    """``mean ± std`` (0-100); the mean alone where there is no std (one seed)."""
    if std is None or math.isnan(std):
        return f"{scale * mean:.{digits}f}"
    return f"{scale * mean:.{digits}f} ± {scale * std:.{digits}f}"


def table5_markdown(summary: pd.DataFrame, paper: str | None) -> str:
    """Table 5 layout: one row per score, AUROC / AUPR-Out / FPR95 / Reject (0-100, mean ± std over
    seeds; best of each column in bold), with the paper's values beside ours for ``paper``."""
    lookup = summary.set_index(["detector", "metric"])
    order = list(dict.fromkeys(summary["detector"]))
    best = {}
    for m, _, higher in OOD_METRICS:
        means = {d: lookup.loc[(d, m), "mean"] for d in order}
        best[m] = (max if higher else min)(means.values())
    paper_rows = PAPER_TABLE5.get(paper or "", {})
    rows = []
    for d in order:
        row = {"score": detector_label(d)}
        for m, header, _ in OOD_METRICS:
            cell = _cell(lookup.loc[(d, m), "mean"], lookup.loc[(d, m), "std"])
            row[header] = f"**{cell}**" if lookup.loc[(d, m), "mean"] == best[m] else cell
            if paper_rows or paper:
                value = paper_rows.get(d, {}).get(m)
                row[f"{header.split()[0]} (paper)"] = DASH if value is None else f"{value:.1f}"
        rows.append(row)
    return markdown_table(pd.DataFrame(rows))


def heads_markdown(summary: pd.DataFrame, top_k: Sequence[int]) -> str:
    """FERL heads: attribute-naming precision@k on the detector's concepts and on the held-out
    images' true concepts, chance, accuracy and abstention (0-100, mean ± std over seeds)."""
    lookup = summary.set_index(["head", "metric"])
    rows = []
    for h in dict.fromkeys(summary["head"]):
        row = {"head": HEAD_LABELS.get(h, h)}
        for prefix, label in (("precision", "p@{k}"), ("true_concepts_precision", "p@{k} true concepts")):
            for k in top_k:
                row[label.format(k=k)] = _cell(*lookup.loc[(h, f"{prefix}@{k}"), ["mean", "std"]])
        row["chance"] = f"{100 * lookup.loc[(h, 'chance'), 'mean']:.1f}"
        row["truth size"] = f"{lookup.loc[(h, 'mean_truth_size'), 'mean']:.2f}"
        for k in top_k:
            row[f"p@{k} image truth"] = _cell(*lookup.loc[(h, f"image_precision@{k}"), ["mean", "std"]])
        row["image chance"] = f"{100 * lookup.loc[(h, 'image_chance'), 'mean']:.1f}"
        for m, header in (("accuracy", "retained acc."), ("abstain_test", "abstain retained"),
                          ("abstain_novel", "abstain held-out"), ("caught_test", "caught retained"),
                          ("caught_novel", "caught held-out")):
            row[header] = _cell(*lookup.loc[(h, m), ["mean", "std"]])
        at_rate = [m for m in dict.fromkeys(summary["metric"]) if m.startswith("at_operating_point:")]
        if at_rate:  # the baseline that catches the most held-out images at the head's retained rate
            best = max(at_rate, key=lambda m: lookup.loc[(h, m), "mean"])
            row["best baseline at that retained rate"] = (
                f"{_cell(*lookup.loc[(h, best), ['mean', 'std']])} ({detector_label(best.split(':', 1)[1])})")
        row["rules"] = f"{lookup.loc[(h, 'rules'), 'mean']:.0f}"
        rows.append(row)
    return markdown_table(pd.DataFrame(rows))


def examples_markdown(results: Sequence[dict]) -> str:
    """Example explanations of held-out images: FERL's decision, named attributes, ground truth."""
    lines = ["# Example explanations of held-out-class images", "",
             "Each image's class was removed before the detector, the calibrator and FERL were fitted. "
             "Named attributes are FERL's most anomalous concepts (`anomalous_features`); ✓ marks a "
             "concept in which the class profile differs from the nearest retained class.", ""]
    for r in results:
        for ex in r["examples"]:
            verdict = "abstains (credal set = every retained class)" if ex["abstain"] else \
                "credal set {" + ", ".join(ex["credal_set"]) + "}"
            decision = "**rejected**" if ex["rejected"] else "accepted"
            lines += [
                f"## `{ex['sample_id']}`: {ex['true_class']} (seed {r['seed']}, fold {r['fold']})", "",
                f"- nearest retained class: {', '.join(ex['nearest_retained'])}",
                f"- FERL predicts {ex['prediction']}, {verdict}; ignorance m(Θ) = {ex['ignorance']:.3f} "
                f"(the evidence's reliability at the operating point: {ex['reliability']:.3f})",
                f"- {ex['kind']} score {ex['score']:.3g} vs threshold {ex['threshold']:.3g} (95 % of "
                f"retained val accepted): {decision}",
                f"- strongest rule: IF {' AND '.join(ex['top_rule']) or '(root)'}", "",
                "| rank | named attribute | score | in ground truth |", "|---:|---|---:|:---:|",
                *[f"| {i + 1} | {a['concept']} | {a['score']:.2f} | {'✓' if a['anomalous'] else '✗'} |"
                  for i, a in enumerate(ex["named"])],
                "", f"Ground truth ({len(ex['ground_truth'])}): {', '.join(ex['ground_truth'])}", "",
            ]
    return "\n".join(lines)


def roc_png(out: Path, results: Sequence[dict], detectors: Sequence[str]) -> bytes:
    """ROC curves (OOD positive), vertically averaged over seeds and folds, as PNG bytes."""
    grid = np.linspace(0.0, 1.0, 201)
    curves: dict[str, list[np.ndarray]] = {d: [] for d in detectors}
    for r in results:
        with np.load(out / FOLD_DIR.format(seed=r["seed"], fold=r["fold"]) / r["scores_file"]) as z:
            names = z["detectors"].tolist()
            s_id, s_ood = z["scores_test"], z["scores_novel"]
        labels = np.r_[np.zeros(len(s_id)), np.ones(len(s_ood))]
        for d in detectors:
            j = names.index(d)
            fpr, tpr, _ = roc_curve(labels, np.r_[s_id[:, j], s_ood[:, j]])
            curves[d].append(np.interp(grid, fpr, tpr))
    fig = Figure(figsize=(6, 5.5))
    ax = fig.subplots()
    for d in detectors:
        tpr = np.mean(curves[d], axis=0)
        tpr[0] = 0.0
        auc = np.mean([r["ood"][d]["auroc"] for r in results])
        ax.plot(grid, tpr, lw=2 if d.startswith("ferl") else 1.3, ls="-" if d.startswith("ferl") else "--",
                label=f"{detector_label(d)} (AUROC {100 * auc:.1f})")
    ax.plot([0, 1], [0, 1], color="grey", lw=0.8, ls=":")
    ax.set(xlabel="false-positive rate (retained classes flagged)",
           ylabel="true-positive rate (held-out classes flagged)", xlim=(0, 1), ylim=(0, 1.01),
           title=f"Held-out classes ({len(results)} fold run{'s' if len(results) != 1 else ''})")
    ax.legend(loc="lower right", fontsize=8)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, bbox_inches="tight")
    return buf.getvalue()


#: How each fold status reads in the report.
STATUS_WORDS = {"trained": "trained a detector", "reused": "re-evaluated with an earlier detector",
                "done": "read back from an earlier run"}


def _done_text(record: dict, results: Sequence[dict]) -> list[str]:
    counts = pd.Series([r["status"] for r in results]).value_counts()
    statuses = ", ".join(f"{n} {STATUS_WORDS.get(s, s)}" for s, n in counts.items())
    epochs = record["detector_epochs_override"]
    epochs = "the config's max_epochs" if epochs is None else f"{epochs} (override)"
    rows = []
    for r in results:
        cm = r["detector"]["concept_metrics"]
        rows.append({"seed": r["seed"], "fold": r["fold"], "held out": ", ".join(r["held_out_names"]),
                     "epochs": r["detector"]["epochs"],
                     "concept acc. test": f"{100 * cm['test']['concept_acc']:.1f}",
                     "concept acc. held-out": f"{100 * cm['novel']['concept_acc']:.1f}",
                     "detector s": r["detector"]["fit_seconds"], "fold s": r["seconds"]})
    det = pd.DataFrame(rows)
    return [
        "## What was done", "",
        f"Dataset `{record['dataset']}` ({record['input_kind']}, {record['n_concepts']} concepts, "
        f"{record['fold_classes']} classes in {record['n_folds']} class-disjoint folds, `folds.json`); "
        f"seeds {record['seeds']}, folds {record['folds']}; detector epochs: {epochs}; "
        f"detector checkpoints kept: {record.get('keep_checkpoints', 'all')}. Folds: {statuses}.",
        "For each (seed, fold) the held-out classes were removed before training the concept detector; "
        "the isotonic calibrator was fitted on retained val, FERL and the baselines on retained train "
        "(the same calibrated vectors), each threshold accepts "
        f"{100 * record['settings']['accept']:.0f} % of retained val; evaluation on retained test vs "
        "held-out test images (OOD = positive class). `steps` in each `result.json` lists the classes "
        "every step used.", "", markdown_table(det),
    ]


def write_report(out: str | os.PathLike, results: Sequence[dict], record: dict) -> dict[str, Path]:
    """Write ``per_fold.csv``, ``per_fold_heads.csv``, ``summary.csv``, ``report.md``,
    ``examples.md``, ``roc.png`` and the curves of :mod:`cbm.openworld.curves` into ``out``
    (atomically); return their paths.

    Raises
    ------
    ValueError
        No results.
    """
    if not results:
        raise ValueError("no fold results to report")
    out = Path(out)
    folds, heads = per_fold_frame(results), heads_frame(results)
    metrics = [m for m, _, _ in OOD_METRICS] + ["accept_id"]
    ood_sum = seed_summary(folds, "detector", metrics)
    head_metrics = [c for c in heads.columns if c not in ("seed", "fold", "head")]
    head_sum = seed_summary(heads, "head", head_metrics)
    summary = pd.concat([ood_sum, head_sum.rename(columns={"head": "detector"})], ignore_index=True)
    files = {name.split(".")[0]: out / name for name in ("per_fold.csv", "per_fold_heads.csv", "summary.csv",
                                                          "report.md", "examples.md", "roc.png")}
    atomic_write_text(files["per_fold"], folds.to_csv(index=False))
    atomic_write_text(files["per_fold_heads"], heads.to_csv(index=False))
    atomic_write_text(files["summary"], summary.to_csv(index=False))
    atomic_write_text(files["examples"], examples_markdown(results))
    detectors = list(dict.fromkeys(folds["detector"]))
    lead = lead_detectors(results, detectors)
    others = [d for d in detectors if d not in lead]
    atomic_write_bytes(files["roc"], roc_png(out, results, lead))
    figures = curve_figures([out / FOLD_DIR.format(seed=r["seed"], fold=r["fold"]) for r in results], results,
                            record["settings"]["heads"][0], detector_label)
    for name, data in figures.items():
        files[name.split(".")[0]] = atomic_write_bytes(out / name, data)
    paper = record.get("paper")
    n_seeds = len(record["seeds"])
    text = [
        f"# Open-world evaluation: {record['name']}", "",
        f"Mean ± std over {n_seeds} seed(s) of the mean over folds {record['folds']}; rates in %.", "",
        "## Detection of held-out classes (layout of the paper's Table 5)", "",
        table5_markdown(ood_sum[ood_sum["detector"].isin(lead)], paper), "",
        "Each FERL head's row is its own score, the kind `predict` flags with; its other scores are in "
        "the appendix. Held-out-class test images are the positives. FPR95: share of retained-class test "
        "images flagged at the threshold that catches 95 % of held-out ones. Reject: share of held-out "
        f"images above the threshold that accepts {100 * record['settings']['accept']:.0f} % of "
        "retained-class validation images.", "",
    ]
    reference = paper or {"cub": "cub200"}.get(record["dataset"])
    if reference in PAPER_NOTES:
        text += [PAPER_NOTES[reference] + ("" if paper else " Not the same data set: no paper column."), ""]
    if record["dataset"] == "awa_features" and paper == "awa2":
        text += ["Our data are AwA1 image features (bag-of-words + PHOG) with the AwA2 predicates, not the "
                 "paper's ResNet-50 on AwA2 images: the paper column is a reference, not a replication.", ""]
    accepted = ood_sum[ood_sum["metric"] == "accept_id"].set_index("detector")["mean"]
    text += ["Retained test inputs accepted at the threshold (target "
             f"{100 * record['settings']['accept']:.0f} %): "
             + ", ".join(f"{detector_label(d)} {100 * v:.1f}" for d, v in accepted[lead].items()), "",
             "ROC curves (the scores above): `roc.png`; per fold: `per_fold.csv`; summary: "
             "`summary.csv`.", "",
             "## Attribute naming and the FERL head", "",
             "p@k: share of FERL's top-k anomalous attributes of a held-out image that lie in the "
             "concepts where its class profile differs from the nearest retained class (Hamming distance "
             "of class profiles; ties: any nearest class). 'true concepts': the same FERL head given the "
             "held-out images' true concept labels instead of the detector's outputs (detector errors "
             "removed). chance: the expected precision of a random ranking (truth size / concepts). "
             "'image truth': the concepts where each held-out image's own concept labels differ from "
             "its nearest retained class profile (differs from the class-level truth where images "
             "deviate from their class profile). "
             "Accuracy on retained test images; abstention and 'caught' (abstained or flagged as novel) "
             "on retained and held-out ones, at the product's operating point (`cbm.heads.operating`, "
             "what `predict` answers); the best baseline flags as many retained images as the head "
             "catches.", "",
             heads_markdown(head_sum, record["settings"]["top_k"]),
             "Example explanations: `examples.md`.", "", curves_markdown(list(figures)),
             *_done_text(record, results)]
    if others:
        text += ["", "## Appendix: FERL's other scores", "",
                 "The same detection with every other score kind evaluated: the product's other kinds, "
                 "the ablation kinds (`ferl.benchmarks.ood_kinds`: the parts and predecessors of `typical`, "
                 "the paper's residual and firing scores) and the class evidence read as a confidence.", "",
                 table5_markdown(ood_sum[ood_sum["detector"].isin(others)], paper)]
    atomic_write_text(files["report"], "\n".join(text) + "\n")
    return files
