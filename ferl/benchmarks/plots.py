"""Figures of the tabular benchmark: paper Figures 3 and 4.

Figures are built as ``matplotlib.figure.Figure`` objects (no pyplot state, no GUI backend);
``Figure.savefig`` renders them with Agg.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from ferl.benchmarks.methods import METHODS

__all__ = ["plot_accuracy_vs_size", "plot_shift"]


def plot_accuracy_vs_size(main: pd.DataFrame) -> Figure:
    """Figure 3: mean accuracy against mean model size (log axis), one point per method.

    Parameters
    ----------
    main : pandas.DataFrame
        Per-fold method rows (``method``, ``accuracy``, ``size``); methods without a size
        (``nan``) are left out.

    Returns
    -------
    matplotlib.figure.Figure
    """
    per = main.groupby(["dataset", "method"])[["accuracy", "size"]].mean().reset_index()
    means = per.groupby("method")[["accuracy", "size"]].mean().dropna()
    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    for name, row in means.iterrows():
        label = METHODS[name].label if name in METHODS else name
        ax.scatter(row["size"], 100 * row["accuracy"], s=40)
        ax.annotate(label, (row["size"], 100 * row["accuracy"]), textcoords="offset points",
                    xytext=(4, 4), fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("model size (leaves / rules, log scale)")
    ax.set_ylabel("mean accuracy (%)")
    ax.set_title(f"Accuracy vs size over {per['dataset'].nunique()} data sets")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return fig


def plot_shift(shift: pd.DataFrame) -> Figure:
    """Figure 4: coverage and mean set size against the shift level ``k``.

    Per-data-set fold means are averaged over data sets; bands are 1.96 standard errors across
    data sets.

    Parameters
    ----------
    shift : pandas.DataFrame
        Rows with ``dataset``, ``k``, ``method``, ``coverage``, ``set_size``.

    Returns
    -------
    matplotlib.figure.Figure
    """
    per = shift.groupby(["dataset", "method", "k"])[["coverage", "set_size"]].mean().reset_index()
    fig = Figure(figsize=(9, 3.5))
    axes = fig.subplots(1, 2)
    for method, group in per.groupby("method"):
        agg = group.groupby("k")[["coverage", "set_size"]].agg(["mean", "sem"])
        ks = agg.index.to_numpy()
        for ax, metric in zip(axes, ("coverage", "set_size"), strict=True):
            mean = agg[(metric, "mean")].to_numpy()
            band = 1.96 * np.nan_to_num(agg[(metric, "sem")].to_numpy())
            ax.plot(ks, mean, marker="o", label=method)
            ax.fill_between(ks, mean - band, mean + band, alpha=0.2)
    axes[0].axhline(0.9, color="grey", linestyle="--", linewidth=1)
    axes[0].set_ylabel("coverage")
    axes[1].set_ylabel("mean set size")
    for ax in axes:
        ax.set_xlabel("shift k (x sigma)")
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    return fig
