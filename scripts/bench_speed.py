"""FERL fit / predict time against scikit-learn's CART on the same folds of the KEEL data sets.

Prints one row per data set with the mean fit and predict time per fold of CART and of each FERL
variant, and the ratios FERL / CART measured side by side in this run, then the medians. The numba
warm-up (compilation, or loading the on-disk cache with ``cache=True``) is timed separately and is
not part of any row.

    python scripts/bench_speed.py [--data-root DIR] [--datasets wine,pima] [--folds 5] [--seed 0]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.model_selection import StratifiedKFold
from sklearn.preprocessing import MinMaxScaler
from sklearn.tree import DecisionTreeClassifier

from ferl import PRESETS, FERLClassifier
from ferl.benchmarks.keel import default_data_root, list_datasets, load_keel


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def warm_up() -> float:
    """Time of the first fit + predict of every variant on a tiny problem (numba compile / cache)."""
    rng = np.random.default_rng(0)
    X = rng.random((60, 3))
    y = (X[:, 0] > 0.5).astype(int)
    start = time.perf_counter()
    for variant in PRESETS:
        FERLClassifier(variant, random_state=0).fit(X, y).predict_set(X)
    return time.perf_counter() - start


def bench_dataset(path: Path, folds: int, seed: int) -> dict:
    data = load_keel(path)
    X, y = data.X, data.y
    times = {name: {"fit": [], "predict": []} for name in ["cart", *PRESETS]}
    splitter = StratifiedKFold(folds, shuffle=True, random_state=seed)
    for tr, te in splitter.split(X, y):
        scaler = MinMaxScaler().fit(X[tr])
        X_tr, X_te = scaler.transform(X[tr]), scaler.transform(X[te])
        models = {"cart": DecisionTreeClassifier(random_state=seed)}
        models.update({v: FERLClassifier(v, random_state=seed) for v in PRESETS})
        for name, model in models.items():
            _, t_fit = _timed(lambda m=model, a=X_tr, b=y[tr]: m.fit(a, b))
            _, t_pred = _timed(lambda m=model, a=X_te: m.predict(a))
            times[name]["fit"].append(t_fit)
            times[name]["predict"].append(t_pred)
    row = {"dataset": data.name, "n": len(y), "d": X.shape[1], "C": data.n_classes}
    for name, t in times.items():
        row[f"{name}_fit_ms"] = 1e3 * np.mean(t["fit"])
        row[f"{name}_pred_ms"] = 1e3 * np.mean(t["predict"])
    for variant in PRESETS:
        row[f"{variant}_fit_ratio"] = row[f"{variant}_fit_ms"] / row["cart_fit_ms"]
        row[f"{variant}_pred_ratio"] = row[f"{variant}_pred_ms"] / row["cart_pred_ms"]
    return row


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-root", type=Path, default=None,
                        help="folder of KEEL .dat files (default: $FERL_DATA_ROOT/tabular, then "
                             "../shared/data/tabular)")
    parser.add_argument("--datasets", default=None, help="comma-separated names (default: all)")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    root = args.data_root or default_data_root()
    if root is None:
        parser.error("no data: pass --data-root or set FERL_DATA_ROOT")
    names = args.datasets.split(",") if args.datasets else list_datasets(root)
    print(f"numba warm-up (compile or cache load), all variants: {warm_up():.2f} s")
    rows = []
    for name in names:
        rows.append(bench_dataset(Path(root) / f"{name}.dat", args.folds, args.seed))
        r = rows[-1]
        print(f"{name:12s} n={r['n']:6d} d={r['d']:3d} C={r['C']:2d}  CART fit {r['cart_fit_ms']:7.1f} ms  "
              + "  ".join(f"{v} fit x{r[f'{v}_fit_ratio']:.1f} pred x{r[f'{v}_pred_ratio']:.1f}"
                          for v in PRESETS), flush=True)
    table = pd.DataFrame(rows).set_index("dataset")
    pd.set_option("display.width", 250)
    cols = ["n", "d", "C", "cart_fit_ms", *(f"{v}_fit_ms" for v in PRESETS), "cart_pred_ms",
            *(f"{v}_pred_ms" for v in PRESETS), *(f"{v}_fit_ratio" for v in PRESETS),
            *(f"{v}_pred_ratio" for v in PRESETS)]
    print()
    print(table[cols].round(2).to_string())
    print("\nmedian over data sets (ratio = FERL / CART, measured side by side):")
    for variant in PRESETS:
        print(f"  FERL-{variant:8s} fit x{table[f'{variant}_fit_ratio'].median():.1f}  "
              f"predict x{table[f'{variant}_pred_ratio'].median():.1f}  "
              f"(median fit {table[f'{variant}_fit_ms'].median():.1f} ms vs CART "
              f"{table['cart_fit_ms'].median():.1f} ms)")


if __name__ == "__main__":
    main()
