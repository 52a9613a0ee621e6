"""The run report's section on concept interventions, from ``<run>/interventions/`` (written by
``evaluate-interventions``, :mod:`cbm.interventions`): one row per head and fit with its best
policy, and the curves; the full table (every policy) stays in ``interventions/interventions.md``."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from cbm.heads.tables import HEAD_LABELS
from cbm.interventions.report import GAIN_SHARE, k_for_gain, mean_curves
from ferl.benchmarks.tables import markdown_table

__all__ = ["SHOWN_K", "interventions_section"]

#: Answered groups shown as columns; the best policy of a head is the one most accurate at the last.
SHOWN_K = (0, 1, 2, 3)


def _best_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (head, fit) on test: the policy most accurate at ``SHOWN_K[-1]`` answered groups."""
    mean = mean_curves(frame)
    test = mean[mean["split"] == "test"]
    rows = []
    for (head, fit), part in test.groupby(["head", "fit"], sort=False):
        at = part[part["k"] == min(SHOWN_K[-1], int(part["k"].max()))]
        policy = at.sort_values("accuracy", ascending=False, kind="stable")["policy"].iloc[0]
        curve = part[part["policy"] == policy].sort_values("k")
        by_k = curve.set_index("k")["accuracy"]
        k = k_for_gain(curve)
        row = {"Head": f"{HEAD_LABELS.get(head, head)} ({fit})", "Best policy": f"`{policy}`"}
        row.update({f"k={k_}": f"{100 * by_k[k_]:.1f}" if k_ in by_k.index else "–" for k_ in SHOWN_K})
        row["all answered"] = f"{100 * by_k.iloc[-1]:.1f}"
        row["gain (pts)"] = f"{100 * (by_k.iloc[-1] - by_k.iloc[0]):+.1f}"
        row[f"k for {100 * GAIN_SHARE:.0f} % of the gain"] = "no gain" if k is None else str(k)
        rows.append(row)
    return pd.DataFrame(rows)


def interventions_section(run_dir: Path) -> list[str]:
    """Markdown lines: the best policy of each head and fit on test, and the figure, or a line saying
    how to produce them."""
    folder = run_dir / "interventions"
    if not (folder / "curves.csv").is_file():
        return ["## Concept interventions", "", "Not run for this report (`evaluate-interventions --run "
                f"{run_dir}`).", ""]
    table = _best_rows(pd.read_csv(folder / "curves.csv"))
    return ["## Concept interventions", "",
            "An expert answers, for each test image, the concept groups a policy picks, with the image's "
            "true concept labels, and the head is re-run. *sequential* heads are fit-head's (fitted on the "
            "detector's concepts), *independent* ones are fitted on the true training concepts. Per head, "
            f"the policy most accurate at k = {SHOWN_K[-1]}; gain: every group answered minus none; the last "
            f"column: fewest groups reaching {100 * GAIN_SHARE:.0f} % of that gain.", "",
            "### Test accuracy (%) after k answered groups", "", markdown_table(table), "",
            "Every policy, credal sets and held-out classes: [interventions/interventions.md]"
            "(interventions/interventions.md); curves of every point: `interventions/curves.csv`.", "",
            "![intervention curves](interventions/interventions.png)", ""]
