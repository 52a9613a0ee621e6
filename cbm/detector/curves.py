"""Training curves of a concept detector, read from its CSV logs.

``train-detector`` logs through Lightning's ``CSVLogger`` into
``<run>/detector/logs/version_<N>/metrics.csv`` (one version per session: a resumed run adds one).
:func:`read_training_log` merges them into one row per epoch; :func:`training_curves_figure` draws
the losses and the validation concept metrics. Used by the run report and the open-world report.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

__all__ = ["read_training_log", "training_curves_figure"]

#: Per-epoch columns drawn, as (column, label, panel).
CURVES = (("train/loss_epoch", "train loss", 0), ("val/loss", "val loss", 0),
          ("val/concept_acc", "val concept accuracy", 1), ("val/auroc", "val mean concept AUROC", 1))


def read_training_log(run_dir: str | os.PathLike) -> pd.DataFrame:
    """Per-epoch metrics of a detector run: one row per epoch, columns of :data:`CURVES` present.

    Parameters
    ----------
    run_dir : path-like
        A train-detector run directory (its ``detector/logs/version_*/metrics.csv``).

    Returns
    -------
    DataFrame
        Indexed by epoch (sorted); the last logged value wins where sessions overlap (a resumed run).

    Raises
    ------
    FileNotFoundError
        No CSV log in the run.
    """
    logs = sorted((Path(run_dir) / "detector" / "logs").glob("version_*/metrics.csv"),
                  key=lambda p: int(p.parent.name.split("_")[1]))
    if not logs:
        raise FileNotFoundError(f"no detector CSV logs in {Path(run_dir) / 'detector' / 'logs'}")
    frame = pd.concat([pd.read_csv(p) for p in logs], ignore_index=True)
    frame = frame.dropna(subset=["epoch"])
    cols = [c for c, _, _ in CURVES if c in frame.columns]
    per_epoch = frame.groupby(frame["epoch"].astype(int))[cols].last()
    return per_epoch.dropna(how="all")


def training_curves_figure(logs: Mapping[str, pd.DataFrame], title: str = "") -> Figure:
    """Loss (train, val) and validation concept accuracy / AUROC per epoch.

    Parameters
    ----------
    logs : mapping of str to DataFrame
        Run label -> :func:`read_training_log` output (several runs: one line style each).
    title : str

    Raises
    ------
    ValueError
        No logs.
    """
    if not logs:
        raise ValueError("no training logs to draw")
    fig = Figure(figsize=(9.0, 3.4))
    axes = fig.subplots(1, 2)
    styles = ("-", "--", ":", "-.")
    for i, (run, log) in enumerate(logs.items()):
        for colour, (col, label, panel) in zip(("#3182bd", "#e6550d", "#31a354", "#756bb1"), CURVES,
                                               strict=True):
            if col in log.columns and log[col].notna().any():
                s = log[col].dropna()
                name = label if len(logs) == 1 else f"{label}, {run}"
                axes[panel].plot(s.index + 1, s.values, color=colour, ls=styles[i % len(styles)], marker="o",
                                 ms=3, lw=1.2, label=name if i < 4 else None)
    axes[0].set(xlabel="epoch", ylabel="BCE loss", title="Losses")
    axes[1].set(xlabel="epoch", ylabel="validation metric", title="Validation concept metrics")
    for ax in axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.title.set_fontsize(9)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.suptitle(title or "Concept detector training", fontsize=10)
    fig.tight_layout()
    return fig
