"""The tables and figure of an ``evaluate-shift`` run (``shift.md``, ``coverage.png``), also in the
run report (`cbm.report`)."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

__all__ = ["COLUMNS", "METHOD_LABELS", "shift_figure", "shift_markdown", "shift_png", "shift_summary"]

#: The columns of ``shift.csv``.
COLUMNS = ("method", "corruption", "group", "severity", "n", "accuracy", "ece", "aurc", "coverage",
           "set_size", "abstention", "answered_right", "detect_auroc")
#: Display names of the methods (a preset's or head's name otherwise).
METHOD_LABELS = {"product": "FERL-deep (product)", "ferl-compact": "FERL-compact",
                 "ferl-medium": "FERL-medium", "ferl-deep": "FERL-deep",
                 "ferl-deep-ds-conformal": "FERL-deep, DS-conformal (clean threshold)",
                 "lr-lac": "LR + split conformal", "lr-aps": "LR + APS", "lr-raps": "LR + RAPS",
                 "lr-raps-nonempty": "LR + RAPS, top class kept",
                 "lr-energy": "LR energy", "mahalanobis-concepts": "Mahalanobis (concepts)",
                 "mahalanobis-features": "Mahalanobis (detector features)"}


def _label(method: str) -> str:
    if method in METHOD_LABELS:
        return METHOD_LABELS[method]
    return method.replace("-ds-conformal", ", DS-conformal (clean threshold)")


def shift_summary(frame: pd.DataFrame, metric: str) -> pd.DataFrame:
    """``metric``'s mean over the corruptions, methods by severity (rows: methods in ``frame``'s order;
    columns: severities), NaN-free rows only."""
    table = frame.groupby(["method", "severity"], sort=False)[metric].mean().unstack("severity")
    return table.dropna(how="all")


def _pct(v: float) -> str:
    return "–" if v != v else f"{100 * v:.1f}"


def _markdown(table: pd.DataFrame, fmt, first: str = "Method") -> list[str]:
    cols = [str(c) for c in table.columns]
    lines = [f"| {first} | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for method, row in table.iterrows():
        lines.append(f"| {_label(str(method))} | " + " | ".join(fmt(v) for v in row.to_numpy()) + " |")
    return lines


def shift_markdown(frame: pd.DataFrame, meta: dict) -> str:
    """``shift.md``: the means by severity of every method, the product per corruption at the middle
    severity, and what each column means."""
    size = lambda v: "–" if v != v else f"{v:.2f}"  # noqa: E731
    n_corr = len(meta["corruptions"])
    lines = [f"# Coverage under shift: `{meta['run']}`", "",
             f"{n_corr} corruptions ({', '.join(meta['corruptions'])}) at severities "
             f"{', '.join(map(str, meta['severities']))} on {meta['rows']} test images (seed "
             f"{meta['settings']['seed']}); severity 0: the {meta['clean_rows']} clean test images. Means "
             "over the corruptions. The product is the head and operating point `predict` uses "
             f"(`{meta['product']['head']}`, {meta['product']['inputs']} concepts).", ""]
    for title, metric, fmt in (("Coverage (%): the set holds the class, or the row abstains", "coverage",
                                _pct),
                               ("Set size: mean size of the sets that are not abstentions", "set_size",
                                size),
                               ("Abstention (%)", "abstention", _pct),
                               ("Answered right (%): answered with a set that holds the class",
                                "answered_right", _pct),
                               ("Accuracy (%)", "accuracy", _pct),
                               ("Shift detection AUROC (%): clean test images against this severity's",
                                "detect_auroc", _pct)):
        table = shift_summary(frame, metric)
        if metric == "detect_auroc":
            table = table.drop(columns=[0], errors="ignore")
        lines += [f"## {title}", "", *_markdown(table, fmt), ""]
    mid = sorted(meta["severities"])[len(meta["severities"]) // 2]
    at = frame[frame.severity == mid]
    wide = at.pivot_table(index="corruption", columns="method", values="coverage", sort=False)
    shown = [m for m in ("product", "lr-lac", "lr-raps") if m in wide.columns]
    product = at[at.method == "product"].set_index("corruption")
    lines += [f"## Per corruption at severity {mid}", "",
              "| Corruption | group | product coverage (%) | set size | abstention (%) | answered right (%) "
              "| " + " | ".join(f"{_label(m)} coverage (%)" for m in shown[1:]) + " |",
              "|---" * (5 + len(shown)) + "|"]
    for corruption in wide.index:
        p = product.loc[corruption]
        lines.append(f"| {corruption} | {p['group']} | {_pct(p['coverage'])} | {size(p['set_size'])} | "
                     f"{_pct(p['abstention'])} | {_pct(p['answered_right'])} | "
                     + " | ".join(_pct(wide.loc[corruption, m]) for m in shown[1:]) + " |")
    lines += ["", "Coverage counts an abstention as covered (its set holds every class); answered right does "
              "not. The LR sets are calibrated on the clean val rows as the FERL heads' are (the baseline a "
              "user would pick); `DS-conformal (clean threshold)` is the product's head with the paper's "
              "set, never widened. Detection: each method's own shift score (FERL: its shift score; LR: "
              "1 − max p), beside the dedicated detectors."]
    return "\n".join(lines) + "\n"


def shift_figure(frame: pd.DataFrame, meta: dict) -> Figure:
    """Coverage, set size and detection AUROC against severity, one line per method (means over the
    corruptions; the product's line thicker, its target coverage a grey line)."""
    fig = Figure(figsize=(15, 4.2), layout="tight")
    axes = fig.subplots(1, 3)
    styles = ["-", "--", "-.", ":"]
    for ax, metric, title in zip(axes, ("coverage", "set_size", "detect_auroc"),
                                 ("coverage", "set size (answered)", "shift detection AUROC"), strict=True):
        table = shift_summary(frame, metric)
        for j, (method, row) in enumerate(table.iterrows()):
            product = method == "product"  # black and thick: the default cycle has ten colours
            ax.plot(np.asarray(row.index, dtype=int), row.to_numpy(), styles[j % 4], marker="o",
                    lw=2.6 if product else 1.3, color="black" if product else f"C{j % 10}",
                    label=_label(str(method)), zorder=3 if product else 2)
        ax.set_xlabel("severity (0 = clean)")
        ax.set_xticks(sorted({int(s) for s in frame.severity}))
        ax.set_title(title)
    target = (meta.get("product", {}).get("operating_point") or {}).get("coverage")
    if target is not None:
        axes[0].axhline(target, color="grey", lw=0.8)
    axes[2].legend(fontsize=7, loc="lower right")
    fig.suptitle(f"{len(meta['corruptions'])} corruptions, mean per severity")
    return fig


def shift_png(frame: pd.DataFrame, meta: dict) -> bytes:
    """`shift_figure` as PNG bytes (``coverage.png``)."""
    buf = io.BytesIO()
    shift_figure(frame, meta).savefig(buf, format="png", dpi=110)
    return buf.getvalue()
