"""Rule read-out on the KEEL data sets: its cost next to the fit, and what the merged rules look like.

For every data set and FERL variant, fits once on the whole (min-max scaled) set and prints, side by
side in this run and in CPU time (``time.process_time``; run with ``NUMBA_NUM_THREADS=1``):

* ``fit_s``: the fit, which includes the ``rule_alone_`` pass (`ferl.rules.fires_alone`);
* ``alone/fit``: that pass alone, as a share of the fit;
* ``text/fit``: ``export_text()`` (merging every rule's conditions), as a share of the fit;

and the rule list: rules, conditions printed, conditions merged from several splits, band-only
conditions (membership never 1), and for the compact variant the conditions printed as a term.
The numba warm-up is done once before the first row and is not timed.

    python scripts/bench_rules.py [--data-root DIR] [--datasets wine,pima] [--max-rows 5000]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.preprocessing import MinMaxScaler

from ferl import PRESETS, FERLClassifier
from ferl.benchmarks.keel import default_data_root, list_datasets, load_keel
from ferl.rules import fires_alone


def _cpu(fn):
    start = time.process_time()
    out = fn()
    return out, time.process_time() - start


def bench(path: Path, max_rows: int, seed: int = 0) -> list[dict]:
    data = load_keel(path)
    X, y = data.X, data.y
    if len(y) > max_rows:
        keep = np.random.default_rng(seed).choice(len(y), max_rows, replace=False)
        X, y = X[keep], y[keep]
    X = MinMaxScaler().fit_transform(X)
    rows = []
    sw = np.ones(len(y))
    for variant in PRESETS:
        clf = FERLClassifier(variant, random_state=seed)
        _, t_fit = _cpu(lambda c=clf: c.fit(X, y))
        _, t_alone = _cpu(lambda c=clf: fires_alone(
            c.tree_.sparse_firing(X, bool(c.bounded_support), c._gate_margin()), sw, c.tree_.is_leaf))
        _, t_text = _cpu(clf.export_text)
        conds = [c for r in clf.rules_ for c in r.conditions]
        rows.append({
            "dataset": data.name, "n": len(y), "variant": variant, "rules": clf.n_rules_,
            "fit_s": t_fit, "alone/fit": t_alone / t_fit, "text/fit": t_text / t_fit,
            "conditions": len(conds), "merged": sum(len(c.nodes) > 1 for c in conds),
            "band_only": sum(c.peak < 1 for c in conds),
            "terms": sum(" is " in c.text and c.text.split(" is ")[1].split(" ")[-1]
                         in ("low", "medium", "high") for c in conds),
        })
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-root", type=Path, default=None)
    parser.add_argument("--datasets", default=None, help="comma-separated names (default: all)")
    parser.add_argument("--max-rows", type=int, default=5000, help="subsample larger data sets")
    args = parser.parse_args(argv)
    root = args.data_root or default_data_root()
    if root is None:
        raise SystemExit("error: no data root; pass --data-root or set FERL_DATA_ROOT")
    names = args.datasets.split(",") if args.datasets else list_datasets(root)
    rng = np.random.default_rng(0)
    Xw = rng.random((60, 3))
    for variant in PRESETS:  # numba warm-up, untimed
        FERLClassifier(variant, random_state=0).fit(Xw, (Xw[:, 0] > 0.5).astype(int)).export_text()
    rows = []
    for name in names:
        rows += bench(Path(root) / f"{name}.dat", args.max_rows)
        print(pd.DataFrame(rows[-len(PRESETS):]).to_string(index=False, header=len(rows) == len(PRESETS),
                                                           float_format="%.3f"), flush=True)
    df = pd.DataFrame(rows)
    summary = df.groupby("variant")[["alone/fit", "text/fit"]].agg(["median", "max"])
    counts = df.groupby("variant")[["rules", "conditions", "merged", "band_only", "terms"]].sum()
    print("\n", summary.to_string(float_format="%.3f"), "\n\n", counts.to_string(), sep="")


if __name__ == "__main__":
    main()
