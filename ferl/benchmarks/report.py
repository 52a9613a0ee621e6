"""Write a benchmark run to a folder: raw per-fold CSVs, markdown tables and plots.

Every file is written atomically (temporary file in the same folder, then ``os.replace``).
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from ferl.benchmarks import tables as T
from ferl.benchmarks.plots import plot_accuracy_vs_size, plot_shift
from ferl.benchmarks.runner import BenchmarkResult
from ferl.io.persist import atomic_write_bytes

__all__ = ["render_report", "write_report"]


def _write_csv(path: Path, frame: pd.DataFrame) -> None:
    atomic_write_bytes(path, frame.to_csv(index=False).encode())


def _write_figure(path: Path, fig: Figure) -> None:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    atomic_write_bytes(path, buf.getvalue())


def render_report(result: BenchmarkResult, command: str = "") -> str:
    """The markdown report: every table, the targets and the run's notes.

    Parameters
    ----------
    result : BenchmarkResult
    command : str, optional
        The command line, printed at the top.

    Returns
    -------
    str
    """
    main = result.main
    n_sets = main["dataset"].nunique() if not main.empty else 0
    n_folds = main["fold"].nunique() if not main.empty else 0
    sections = [
        "# Tabular benchmark (paper §4-5, appendices C-F)\n",
        f"{n_sets} data sets x {n_folds} folds, {result.elapsed / 60:.1f} min wall clock."
        + (f" Command: `{command}`" if command else "")
        + "\nRates on the 0-100 scale, mean ± std over data sets of fold means; '(paper)' columns"
        " quote the paper's 30-data-set means; '–' = not reported / not run.\n",
        "## Targets (what the reproduction must reach)\n", T.table_targets(main, result.ood),
        "## Table 1 - accuracy, size and selective risk\n", T.table_main(main),
        "## Table 2 - set-valued prediction (native FERL sets; APS for MLP-Conformal, alpha=0.1)\n",
        T.table_sets(main),
        "## Table 3 - leave-one-class-out OOD (95 % retained-class acceptance)\n",
        T.table_ood(result.ood, result.notes),
        "## Table 8 - evidence sources and combination rule (FERL-deep, same tree)\n",
        T.table_ablation_readout(result.ablations),
        "## Table 9 - bounded-support gate (FERL-deep, same tree)\n",
        T.table_gate(result.ablations),
        "## Table 10 - split criterion (FERL-deep)\n", T.table_gain(result.ablations),
        "## Appendix F - coverage under covariate shift (alpha = 0.1)\n",
        T.table_shift(result.shift),
        "## Appendix E - per-data-set accuracy\n", T.table_per_dataset(main, result.datasets),
        "## Statistics (appendix D)\n", T.table_stats(main),
    ]
    if result.notes:
        sections += ["## Notes\n", "".join(f"- {n}\n" for n in result.notes)]
    return "\n".join(sections)


def write_report(result: BenchmarkResult, out: str | os.PathLike, command: str = "") -> Path:
    """Write ``report.md``, the raw CSVs and the plots into ``out`` (created if needed).

    Parameters
    ----------
    result : BenchmarkResult
    out : str or path-like
    command : str, optional

    Returns
    -------
    Path
        The report file.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    frames = {"folds_methods.csv": result.main, "folds_ood.csv": result.ood,
              "folds_ablations.csv": result.ablations, "folds_shift.csv": result.shift,
              "datasets.csv": result.datasets}
    for name, frame in frames.items():
        _write_csv(out / name, frame)
    if not result.main.empty:
        _write_figure(out / "accuracy_vs_size.png", plot_accuracy_vs_size(result.main))
    if not result.shift.empty:
        _write_figure(out / "shift_coverage.png", plot_shift(result.shift))
    report = out / "report.md"
    atomic_write_bytes(report, render_report(result, command).encode())
    return report
