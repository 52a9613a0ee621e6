"""Tables and figure of ``evaluate-interventions``: metrics against the number of answered groups.

The long table (``curves.csv``) has one row per run x head x fit x policy x split x k;
:func:`mean_curves` averages it over runs (mean and std, std needs two runs), :func:`curves_markdown`
lays it out (accuracy per k, the gain of full intervention and the k at which a policy reaches 95 %
of it,
FERL's credal sets, and on held-out classes the OOD score and its AUROC against the test split), and
:func:`curves_figure` draws the curves.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from cbm.heads.tables import HEAD_LABELS
from ferl.benchmarks.tables import markdown_table

__all__ = ["GAIN_SHARE", "KEYS", "curves_figure", "curves_markdown", "k_for_gain", "mean_curves"]

#: Columns that identify a curve.
KEYS = ("head", "fit", "policy", "split")
_VALUES = ("accuracy", "coverage", "mean_set_size", "abstention", "ignorance", "ood", "auroc")
_POLICY_LABELS = {"random": "random", "uncertainty": "uncertainty", "ectp": "ECTP (Shin et al.)",
                  "evidence": "evidence (ours)"}
_COLUMNS = 9
#: Share of the full-intervention gain that the accuracy table's "k for 95 % of the gain" asks for.
GAIN_SHARE = 0.95
#: How an answer enters a head, by expert mode (`cbm.heads.interventions.expert_values_for`).
_ANSWER = {"auto": "a head as 0 / 1, or for LR heads as the 5th / 95th percentile of its training inputs "
                   "(Koh et al. 2020)",
           "labels": "every head as 0 / 1",
           "percentiles": "every head as the 5th / 95th percentile of its training inputs (Koh et al. 2020)"}


def mean_curves(frame: pd.DataFrame) -> pd.DataFrame:
    """Mean and std over runs of every metric, per curve and k (``<metric>`` and ``<metric>_std``)."""
    values = [v for v in _VALUES if v in frame]
    grouped = frame.groupby([*KEYS, "k"], sort=False)[values]
    out = grouped.mean().join(grouped.std(ddof=1).add_suffix("_std")).reset_index()
    out["runs"] = grouped.size().to_numpy()
    return out


def k_for_gain(curve: pd.DataFrame, share: float = GAIN_SHARE) -> int | None:
    """Fewest answered groups whose accuracy reaches ``share`` of the full-intervention gain.

    The gain is the accuracy with every group answered (the largest k) minus the accuracy with
    none answered (the smallest k); beyond the paper (Koh et al. 2020 and Shin et al. 2023 plot the
    curves). It replaces "within one point of full", which counted a curve that answers make
    worse as reaching its (lower) full value early.

    Parameters
    ----------
    curve : DataFrame
        One curve: columns ``k`` and ``accuracy`` (fractions), one row per k.
    share : float in (0, 1]

    Returns
    -------
    int or None
        That k; None when full intervention gains nothing (accuracy with every group answered at
        most the accuracy with none).

    Raises
    ------
    ValueError
        ``share`` outside (0, 1] or an empty curve.
    """
    if not 0.0 < share <= 1.0:
        raise ValueError(f"share must be in (0, 1], got {share!r}")
    if curve.empty:
        raise ValueError("empty intervention curve")
    acc = curve.sort_values("k")
    none, full = float(acc["accuracy"].iloc[0]), float(acc["accuracy"].iloc[-1])
    if full <= none:
        return None
    ok = acc[acc["accuracy"] >= none + share * (full - none) - 1e-12]
    return int(ok["k"].iloc[0])


def _fmt(mean: float, std: float | None, pct: bool = True, digits: int = 1) -> str:
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "–"
    scale = 100 if pct else 1
    text = f"{scale * mean:.{digits}f}"
    if std is not None and not (isinstance(std, float) and math.isnan(std)):
        text += f" ± {scale * std:.{digits}f}"
    return text


def _shown_ks(ks: Sequence[int]) -> list[int]:
    ks = sorted(ks)
    if len(ks) <= _COLUMNS:
        return ks
    spread = np.linspace(4, len(ks) - 1, _COLUMNS - 4).astype(int)  # positions in the list, not k values
    picks = {ks[0], ks[-1], *ks[1:4], *(ks[int(i)] for i in spread)}
    return sorted(picks)


def _label(head: str, fit: str) -> str:
    return f"{HEAD_LABELS.get(head, head)} ({fit})"


def _accuracy_table(mean: pd.DataFrame, true_acc: pd.DataFrame) -> list[str]:
    test = mean[mean["split"] == "test"]
    ks = _shown_ks(test["k"].unique().tolist())
    rows = []
    for (head, fit), part in test.groupby(["head", "fit"], sort=False):
        truth = true_acc[(true_acc["head"] == head) & (true_acc["fit"] == fit)]["true_concepts_accuracy"]
        for policy, curve in part.groupby("policy", sort=False):
            by_k = curve.set_index("k")
            row = {"Head": _label(head, fit), "Policy": _POLICY_LABELS.get(policy, policy)}
            row.update({f"k={k}": _fmt(by_k.at[k, "accuracy"], by_k.at[k, "accuracy_std"]) for k in ks})
            ordered = curve.sort_values("k")["accuracy"]
            row["gain, all answered (pts)"] = f"{100 * (ordered.iloc[-1] - ordered.iloc[0]):+.1f}"
            k = k_for_gain(curve)
            row["k for 95 % of the gain"] = "no gain" if k is None else str(k)
            row["on true concepts"] = _fmt(truth.mean(), truth.std(ddof=1) if len(truth) > 1 else None)
            rows.append(row)
    return [markdown_table(pd.DataFrame(rows))] if rows else []


def _sets_cell(by_k: pd.DataFrame, k: int) -> str:
    return (f"{_fmt(by_k.at[k, 'coverage'], None)} / {by_k.at[k, 'mean_set_size']:.2f} / "
            f"{_fmt(by_k.at[k, 'abstention'], None)}")


def _sets_table(mean: pd.DataFrame) -> list[str]:
    test = mean[(mean["split"] == "test") & mean["mean_set_size"].notna()]
    if test.empty:
        return []
    ks = _shown_ks(test["k"].unique().tolist())[:5] + [int(test["k"].max())]
    rows = []
    for (head, fit, policy), curve in test.groupby(["head", "fit", "policy"], sort=False):
        by_k = curve.set_index("k")
        rows.append({"Head": _label(head, fit), "Policy": _POLICY_LABELS.get(policy, policy),
                     **{f"k={k}": _sets_cell(by_k, k) for k in dict.fromkeys(ks)}})
    return [markdown_table(pd.DataFrame(rows))]


def _novel_table(mean: pd.DataFrame, true_acc: pd.DataFrame) -> list[str]:
    novel = mean[(mean["split"] == "novel") & mean["ood"].notna()]
    if novel.empty:
        return []
    ks = list(dict.fromkeys(_shown_ks(novel["k"].unique().tolist())[:5] + [int(novel["k"].max())]))
    rows = []
    for (head, fit, policy), curve in novel.groupby(["head", "fit", "policy"], sort=False):
        by_k = curve.set_index("k")
        kinds = true_acc[(true_acc["head"] == head) & (true_acc["fit"] == fit)]["ood_kind"].dropna().unique()
        rows.append({"Head": _label(head, fit), "Policy": _POLICY_LABELS.get(policy, policy),
                     "OOD score": " / ".join(kinds) or "–",
                     **{f"k={k}": f"{by_k.at[k, 'ood']:.2f} / {_fmt(by_k.at[k, 'auroc'], None)}"
                        for k in ks}})
    return [markdown_table(pd.DataFrame(rows))]


def curves_markdown(frame: pd.DataFrame, true_acc: pd.DataFrame, info: dict) -> str:
    """The report section (Markdown) of one or several runs.

    Parameters
    ----------
    frame : DataFrame
        The long table (``run`` plus :data:`KEYS`, ``k`` and the metrics).
    true_acc : DataFrame
        ``run, head, fit, ood_kind, true_concepts_accuracy`` (the kind of the FERL heads' OOD
        score, :attr:`cbm.heads.FERLHead.ood_kind`, and the test accuracy on the expert values of
        the true concepts).
    info : dict
        ``title``, ``runs`` (names), ``n_groups``, ``n_one_hot``, ``rows`` (per split), ``settings``.
    """
    mean = mean_curves(frame)
    s = info["settings"]
    runs = info["runs"]
    over = f"mean ± std over {len(runs)} runs" if len(runs) > 1 else f"run `{runs[0]}`"
    rows = ", ".join(f"{k} {v}" for k, v in info["rows"].items())
    lines = [
        f"# {info['title']}", "",
        f"An expert answers, for each input, the concept groups a policy picks, with the input's true "
        f"concept labels; the head is re-run on the answered concepts. {info['n_groups']} groups "
        f"({info['n_one_hot']} one-hot); heads read {s['inputs']} concepts; answers enter "
        f"{_ANSWER[s['expert']]} (expert mode `{s['expert']}`). "
        f"Rows{' (all runs)' if len(runs) > 1 else ''}: {rows}; {over}."
        f" *sequential* heads are fit-head's, fitted on the detector's concepts (CART heads on those and "
        "on a copy of them with a random share of each row's groups answered, so that an answer takes "
        "them to leaves their training filled), *independent* heads are fitted on the true training "
        "concepts (Koh et al.'s independent bottleneck).", "",
        "## Test accuracy (%) after k answered groups", "", *_accuracy_table(mean, true_acc),
        "\"gain, all answered\": accuracy with every group answered minus with none (negative: answers make "
        "the head worse); \"k for 95 % of the gain\": fewest groups whose mean accuracy reaches 95 % of that "
        "gain (\"no gain\" where full intervention does not help); \"on true concepts\": the head on the "
        "expert values of every true concept (equal to the last k).",
    ]
    sets = _sets_table(mean)
    if sets:
        lines += ["", "## FERL credal sets on test: coverage (%) / mean set size / abstention (%)", "", *sets]
    novel = _novel_table(mean, true_acc)
    if novel:
        lines += ["", "## Held-out classes: mean OOD score / AUROC (%) against the test split at the same k",
                  "", *novel, "Answers move the OOD score of held-out-class images: an answered anomalous "
                  "attribute that the detector had missed makes the image look novel."]
    return "\n".join(lines) + "\n"


def curves_figure(frame: pd.DataFrame) -> Figure:
    """Accuracy (test), mean set size (test, FERL) and AUROC (held-out classes, FERL) against k,
    one row of panels per head x fit, one line per policy (mean over runs)."""
    mean = mean_curves(frame)
    pairs = list(dict.fromkeys(zip(mean["head"], mean["fit"], strict=True)))
    panels = (("test", "accuracy", "test accuracy (%)", 100), ("test", "mean_set_size", "mean set size", 1),
              ("novel", "auroc", "held-out AUROC (%)", 100))
    fig = Figure(figsize=(12, 2.6 * len(pairs) + 0.6))
    axes = fig.subplots(len(pairs), len(panels), squeeze=False)
    for row, (head, fit) in enumerate(pairs):
        part = mean[(mean["head"] == head) & (mean["fit"] == fit)]
        for col, (split, key, title, scale) in enumerate(panels):
            ax = axes[row, col]
            for policy, curve in part[part["split"] == split].groupby("policy", sort=False):
                if curve[key].notna().any():
                    ax.plot(curve["k"], scale * curve[key], marker=".",
                            label=_POLICY_LABELS.get(policy, policy))
            ax.set_title(f"{_label(head, fit)}: {title}", fontsize=9)
            ax.set_xlabel("answered groups k", fontsize=8)
            ax.tick_params(labelsize=7)
            if ax.lines and row == 0 and col == 0:
                ax.legend(fontsize=7)
            if not ax.lines:
                ax.set_visible(False)
    fig.tight_layout()
    return fig
