"""Tables of the ``fit-head`` job, laid out like the paper's Table 4 (§5.2).

Rows are heads, columns the raw and the per-concept calibrated concept probabilities. A second
table compares the heads' training concepts (cross-fitted, in-sample, true; see
:mod:`cbm.heads.train_concepts`). The paper's
values are printed beside ours where the dataset matches. Our copy of the paper gives Table 4's
caption but not its cells; the values quoted in §5.2's text are the only ones used
(`PAPER_TABLE4`: FERL-deep's raw and calibrated accuracy on CUB-20 and CUB-200), and "all methods
perform similarly around 95 %" on AwA2 (no gain from calibration).
"""

from __future__ import annotations

import pandas as pd

from ferl.benchmarks.tables import markdown_table

__all__ = ["DATASET_LABELS", "HEAD_LABELS", "PAPER_TABLE4", "SOURCE_LABELS", "heads_frame", "heads_markdown"]

DASH = "–"
#: Display names of the heads (Table 4's row names).
HEAD_LABELS = {
    "ferl-compact": "FERL-compact", "ferl-medium": "FERL-medium", "ferl-deep": "FERL-deep",
    "cart": "CART", "cart-compact": "CART (compact's size)", "lr": "LR",
    "lr-restricted": "Concept-restricted LR",
}
#: Display names of the paper's datasets.
DATASET_LABELS = {"cub20": "CUB-20", "cub200": "CUB-200", "awa2": "AwA2"}
#: The paper's test accuracy (%) as (raw, calibrated), from §5.2's text.
PAPER_TABLE4: dict[str, dict[str, tuple[str, str]]] = {
    "cub20": {"ferl-deep": ("77.67", "86.28")},
    "cub200": {"ferl-deep": ("59.38", "65.18")},
    "awa2": {head: ("≈95", "≈95") for head in HEAD_LABELS},
}
#: Display names of the training-concept sources.
SOURCE_LABELS = {"in-sample": "in-sample (paper)", "cross-fitted": "cross-fitted",
                 "independent": "true concepts (independent)"}
#: What each training-concept source is, as the table 'heads by training concepts' says it.
_SOURCE_TEXT = {"in-sample": "the detector's in-sample train concepts (the paper's protocol; train "
                             "probabilities are cleaner than test ones)",
                "cross-fitted": "its cross-fitted (out-of-fold) train concepts",
                "independent": "the true concepts (Koh et al.'s independent bottleneck)"}
_SET_METRICS = ("coverage", "determinacy", "mean_set_size", "abstention_rate", "u65", "u80")


def _size(size: dict) -> str:
    parts = []
    if size.get("rules") is not None:
        parts.append(f"{size['rules']} rules")
    if size.get("nonzero_weights") is not None:
        parts.append(f"{size['nonzero_weights']} weights")
    parts.append(f"{size['concepts_used']} concepts")
    return ", ".join(parts)


def _pct(value: float) -> str:
    return f"{100 * value:.2f}"


def heads_frame(entry: dict) -> pd.DataFrame:
    """One row per (head, inputs) with every test metric and the size, for ``heads.csv``.

    Parameters
    ----------
    entry : dict
        The ``fit_head`` entry of ``metrics.json`` (:func:`cbm.heads.fit.fit_head`).

    Returns
    -------
    pandas.DataFrame
        Columns ``head, inputs, train_concepts, accuracy, aurc, ece, <set metrics>, rules,
        nonzero_weights, concepts_used, fit_seconds``; rates are fractions, AURC is on the 0-100
        scale. The saved heads' rows first, then accuracy, AURC and ECE of the heads fitted on the
        other training-concept sources.
    """
    main = entry.get("train_concepts", "in-sample")
    rows = []
    for head, by_input in entry["heads"].items():
        for inputs, m in by_input.items():
            row = {"head": head, "inputs": inputs, "train_concepts": main}
            row.update({k: m.get(k) for k in ("accuracy", "aurc", "ece", *_SET_METRICS)})
            row.update(m["size"])
            row["fit_seconds"] = m.get("fit_seconds")
            rows.append(row)
    for source, heads in entry.get("train_concepts_compared", {}).items():
        if source != main:
            rows += [{"head": h, "inputs": i, "train_concepts": source, **m}
                     for h, by_input in heads.items() for i, m in by_input.items()]
    return pd.DataFrame(rows)


def _sources_markdown(entry: dict) -> list[str]:
    """The table 'heads by training concepts' (empty when only one source was fitted)."""
    compared = entry.get("train_concepts_compared", {})
    if len(compared) < 2:
        return []
    heads = next(iter(compared.values()))
    table = pd.DataFrame({"Head": [HEAD_LABELS.get(h, h) for h in heads]})
    sources = sorted(compared, key=list(SOURCE_LABELS).index)
    for source in sources:
        by_head = compared[source]
        for kind, short in (("raw", "raw"), ("calibrated", "calib.")):
            table[f"{SOURCE_LABELS.get(source, source)} {short}"] = [_pct(by_head[h][kind]["accuracy"])
                                                                     for h in heads]
    fitted = [_SOURCE_TEXT.get(s, s) for s in sources]  # only the sources of the table's columns
    return ["", "## Heads by training concepts (test accuracy %)", "",
            f"The same heads fitted on {', '.join(fitted[:-1])} and on {fitted[-1]}; always tested on "
            f"the detector's test concepts. The tables above use **{entry['train_concepts']}** train "
            "concepts.", "", markdown_table(table)]


def _compact_note(heads: dict, n_classes: int) -> list[str]:
    """What FERL-compact's rule budget allows, beside the CART of its size (empty without compact)."""
    if "ferl-compact" not in heads:
        return []
    rules = {i: heads["ferl-compact"][i]["size"]["rules"] for i in ("raw", "calibrated")}
    counts = " / ".join(str(rules[i]) for i in ("raw", "calibrated"))
    lines = [f"FERL-compact has {counts} rules (raw / calibrated) for {n_classes} classes."]
    if all(heads["ferl-compact"][i]["size"].get("evidence") == "learned" for i in ("raw", "calibrated")):
        lines.append("Beside its rules it reads one source per concept through learned weights of evidence, "
                     "so its rules need not name every class.")
    elif max(rules.values()) < n_classes:
        lines.append(f"A rule concludes one class, so {max(rules.values())} rules cannot name {n_classes} "
                     f"classes: at least {n_classes - max(rules.values())} classes are no rule's "
                     "conclusion, and compact cannot reach the accuracy the concepts allow.")
    if "cart-compact" in heads:
        lines.append("CART (compact's size) is a CART grown to as many leaves as compact has rules on the "
                     "same inputs (`max_leaf_nodes`), the same-size baseline.")
    return [" ".join(lines) + "\n"]


def _coverage_markdown(entry: dict) -> list[str]:
    """The sets at the target coverage: FERL's coverage-targeted and interval-dominance sets beside
    every head's split-conformal sets (calibrated concepts)."""
    coverage, heads = entry.get("coverage"), entry["heads"]
    rows = [h for h in heads if "conformal_coverage" in heads[h]["calibrated"]]
    if coverage is None or not rows:
        return []

    def cell(h, key, fmt, targeted=False):
        # a FERL head's coverage-targeted set is where the paper's set stands beside it
        m = heads[h]["calibrated"]
        value = None if targeted and "paper_coverage" not in m else m.get(key)
        return DASH if value is None else fmt(value)

    size = lambda v: f"{v:.2f}"  # noqa: E731
    table = pd.DataFrame({
        "Head": [HEAD_LABELS.get(h, h) for h in rows],
        "FERL set: coverage (%)": [cell(h, "coverage", _pct, True) for h in rows],
        "size": [cell(h, "answered_set_size", size, True) for h in rows],
        "abstention (%)": [cell(h, "abstention_rate", _pct, True) for h in rows],
        "interval dominance: coverage (%)": [cell(h, "paper_coverage", _pct) for h in rows],
        "size ": [cell(h, "paper_mean_set_size", size) for h in rows],
        "abstention (%) ": [cell(h, "paper_abstention_rate", _pct) for h in rows],
        "conformal: coverage (%)": [cell(h, "conformal_coverage", _pct) for h in rows],
        "size  ": [cell(h, "conformal_mean_set_size", size) for h in rows],
    })
    return ["", f"## Credal and conformal sets at {100 * coverage:g} % target coverage (test, calibrated "
                "concepts)", "", markdown_table(table), "",
            "FERL set: the product's credal set, the classes whose plausibility Pl(c) reaches a threshold "
            "calibrated on val (split conformal on −log Pl(y), the paper's DS-conformal sets of appendix F; "
            "val calibrated out of sample) that falls as the image's shift score grows "
            "(`cbm.heads.operating`); size: of the sets that are not abstentions (a set wider than "
            f"{entry.get('max_set_size', 'max_set_size')} classes abstains). Interval dominance: the set of "
            "eq. 4. "
            "Conformal: every head's split-conformal sets on 1 − p(c), calibrated on the same val rows "
            "(the baseline a user would pick)."]


def heads_markdown(entry: dict) -> str:
    """Markdown report: Table-4-style accuracy table, selective risk / ECE, FERL sets, calibration.

    Parameters
    ----------
    entry : dict
        The ``fit_head`` entry of ``metrics.json``.

    Returns
    -------
    str
        Markdown text (accuracy, ECE and set rates in %, AURC on the 0-100 scale).
    """
    heads = entry["heads"]
    paper_key = entry.get("paper_dataset")
    paper = PAPER_TABLE4.get(paper_key, {}) if paper_key else {}
    n = entry["n"]
    n_train = entry.get("n_train_classes", entry["n_classes"])
    classes = (f"{entry['n_classes']} classes" if n_train == entry["n_classes"]
               else f"{n_train} classes in training, {entry['n_classes']} in the data set")
    lines = [
        "# Concept-bottleneck heads (paper Table 4 layout)", "",
        f"Test accuracy (%) of each head fitted on train with raw and with per-concept isotonic-calibrated "
        f"concept probabilities (calibration fitted on val). Concepts: `{entry['concepts']}` "
        f"({entry['n_concepts']} concepts, {classes}; n train/val/test = "
        f"{n['train']}/{n['val']}/{n['test']}). Seed {entry['seed']}. Heads fitted on "
        f"**{SOURCE_LABELS.get(entry.get('train_concepts', 'in-sample'), entry.get('train_concepts'))}** "
        "train concepts.",
    ]
    if n.get("test_unseen_class_rows"):
        lines.append(f"Open-world run: {n['test_unseen_class_rows']} test rows of classes unseen in train "
                     "are left out of these metrics.")
    table = pd.DataFrame({
        "Head": [HEAD_LABELS.get(h, h) for h in heads],
        "Raw": [_pct(heads[h]["raw"]["accuracy"]) for h in heads],
        "Calib.": [_pct(heads[h]["calibrated"]["accuracy"]) for h in heads],
    })
    if paper_key:
        label = DATASET_LABELS.get(paper_key, paper_key)
        table[f"Paper raw ({label})"] = [paper.get(h, (DASH, DASH))[0] for h in heads]
        table[f"Paper calib. ({label})"] = [paper.get(h, (DASH, DASH))[1] for h in heads]
    table["Size (raw)"] = [_size(heads[h]["raw"]["size"]) for h in heads]
    table["Size (calib.)"] = [_size(heads[h]["calibrated"]["size"]) for h in heads]
    lines += ["", markdown_table(table), *_compact_note(heads, n_train)]
    if paper_key:
        lines.append(f"Paper values: §5.2's text for {DATASET_LABELS.get(paper_key, paper_key)} "
                     f"({DASH} = not given in our copy of the paper); the paper's concept detector is an "
                     f"image CNN, this run's detector is from `{entry.get('run_dataset')}`.")
    risk = pd.DataFrame({
        "Head": [HEAD_LABELS.get(h, h) for h in heads],
        "AURC raw": [f"{heads[h]['raw']['aurc']:.2f}" for h in heads],
        "AURC calib.": [f"{heads[h]['calibrated']['aurc']:.2f}" for h in heads],
        "ECE raw (%)": [_pct(heads[h]["raw"]["ece"]) for h in heads],
        "ECE calib. (%)": [_pct(heads[h]["calibrated"]["ece"]) for h in heads],
    })
    lines += _sources_markdown(entry)
    lines += ["", "## Selective risk and calibration of the heads (test)", "", markdown_table(risk), "",
              "AURC: area under the risk-coverage curve, rows ranked by the largest class probability (%, "
              "lower is better); ECE: expected calibration error of that probability (15 bins). A FERL "
              "head's class probability is the pignistic BetP(c) = m({c}) + m(Θ)/C: a head that is right "
              "but keeps some ignorance m(Θ) puts BetP below its accuracy, and its ECE is that "
              "under-confidence."]
    ferl = [(h, i) for h in heads if "coverage" in heads[h]["raw"] for i in ("raw", "calibrated")]
    if ferl:
        sets = pd.DataFrame({
            "Head": [HEAD_LABELS.get(h, h) for h, _ in ferl], "Inputs": [i for _, i in ferl],
            "Coverage (%)": [_pct(heads[h][i]["coverage"]) for h, i in ferl],
            "Determinacy (%)": [_pct(heads[h][i]["determinacy"]) for h, i in ferl],
            "Mean set size": [f"{heads[h][i]['mean_set_size']:.2f}" for h, i in ferl],
            "Abstention (%)": [_pct(heads[h][i]["abstention_rate"]) for h, i in ferl],
            "Novelty flag (%)": [_pct(heads[h][i]["ood_flag_rate"]) if "ood_flag_rate" in heads[h][i]
                                 else DASH for h, i in ferl],
            "u65 (%)": [_pct(heads[h][i]["u65"]) for h, i in ferl],
            "u80 (%)": [_pct(heads[h][i]["u80"]) for h, i in ferl],
        })
        lines += ["", "## FERL credal sets (test)", "", markdown_table(sets)]
    lines += _coverage_markdown(entry)
    cal = entry["calibration"]
    lines += [
        "", "## Per-concept calibration", "",
        f"Mean per-concept ECE (%), raw → calibrated: val {_pct(cal['val']['concept_ece_raw_mean'])} → "
        f"{_pct(cal['val']['concept_ece_calibrated_mean'])} (in-sample: the maps are fitted on val); "
        f"test {_pct(cal['test']['concept_ece_raw_mean'])} → "
        f"{_pct(cal['test']['concept_ece_calibrated_mean'])}. "
        "Maps: " + ", ".join(f"{v} {k}" for k, v in sorted(cal["map_kinds"].items())) + ".",
    ]
    return "\n".join(lines) + "\n"
