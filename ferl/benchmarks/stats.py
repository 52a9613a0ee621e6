"""Statistics over data sets (paper §5.1 and appendix D, Table 11).

Tests pair the per-data-set means of the methods (folds are not independent observations):
a Friedman test with average ranks, and Wilcoxon signed-rank tests of a reference method against
each other method with Holm's step-down correction.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

__all__ = ["friedman", "holm", "per_dataset_means", "wilcoxon_vs"]


def per_dataset_means(rows: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Fold means of one metric, one row per data set and one column per method.

    Parameters
    ----------
    rows : pandas.DataFrame
        Per-fold rows with ``dataset``, ``method`` and ``metric`` columns.
    metric : str

    Returns
    -------
    pandas.DataFrame
        Shape (n_datasets, n_methods); methods with any missing value are dropped.
    """
    table = rows.pivot_table(index="dataset", columns="method", values=metric, aggfunc="mean")
    return table.dropna(axis=1, how="any")


def friedman(table: pd.DataFrame, higher_is_better: bool = True) -> tuple[float, float, pd.Series]:
    """Friedman test across data sets and the methods' average ranks.

    Parameters
    ----------
    table : pandas.DataFrame
        (n_datasets, n_methods) per-data-set means.
    higher_is_better : bool, default=True
        Rank 1 is the highest value (accuracy) or the lowest (AURC).

    Returns
    -------
    statistic, p_value : float
        ``nan`` when fewer than 3 methods or 2 data sets.
    ranks : pandas.Series
        Average rank per method (ties share the mean rank), sorted ascending.
    """
    values = table.to_numpy(dtype=float)
    signed = -values if higher_is_better else values
    ranks = pd.Series(
        stats.rankdata(signed, axis=1).mean(axis=0), index=table.columns
    ).sort_values()
    if values.shape[1] < 3 or values.shape[0] < 2:
        return float("nan"), float("nan"), ranks
    result = stats.friedmanchisquare(*values.T)
    return float(result.statistic), float(result.pvalue), ranks


def holm(p_values: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values (family-wise error control).

    Parameters
    ----------
    p_values : ndarray of shape (m,), float in [0, 1]

    Returns
    -------
    ndarray of shape (m,)
        ``max_{j <= i} min(1, (m - j + 1) p_(j))`` in the original order.
    """
    p = np.asarray(p_values, dtype=float)
    order = np.argsort(p, kind="stable")
    m = p.size
    adjusted = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out = np.empty(m)
    out[order] = adjusted
    return out


def wilcoxon_vs(
    table: pd.DataFrame, reference: str, higher_is_better: bool = True
) -> pd.DataFrame:
    """Wilcoxon signed-rank tests of ``reference`` against every other method, Holm-corrected.

    Parameters
    ----------
    table : pandas.DataFrame
        (n_datasets, n_methods) per-data-set means.
    reference : str
        Column of the reference method (the paper: FERL-deep).
    higher_is_better : bool, default=True
        Sets which sign counts as a win.

    Returns
    -------
    pandas.DataFrame
        One row per other method: ``mean_diff`` (reference - other), ``wins``, ``ties``,
        ``losses`` (for the reference), ``p`` (two-sided; 1 when every difference is zero) and
        ``p_holm``.

    Raises
    ------
    ValueError
        ``reference`` is not a column.
    """
    if reference not in table.columns:
        raise ValueError(f"reference {reference!r} not among {list(table.columns)}")
    rows = []
    for other in table.columns.drop(reference):
        diff = (table[reference] - table[other]).to_numpy(dtype=float)
        better = diff > 0 if higher_is_better else diff < 0
        worse = diff < 0 if higher_is_better else diff > 0
        p = float(stats.wilcoxon(diff).pvalue) if np.any(diff != 0) else 1.0
        rows.append(
            {
                "method": other,
                "mean_diff": float(diff.mean()),
                "wins": int(better.sum()),
                "ties": int((diff == 0).sum()),
                "losses": int(worse.sum()),
                "p": p,
            }
        )
    out = pd.DataFrame(rows)
    if not out.empty:
        out["p_holm"] = holm(out["p"].to_numpy())
    return out
