"""FERL-compact against a CART of its own size on the KEEL sets (`ferl.presets`).

Every candidate is a set of `FERLClassifier` parameters over ``variant="compact"``. On each data
set and outer fold of the tabular benchmark (`ferl.benchmarks.protocol`: the same splits, fit /
calibration / test parts and scaling) it is fitted on the fit part, and a scikit-learn CART with
``max_leaf_nodes`` = its rule count is fitted beside it. Both are scored on the calibration part
and by ``--inner``-fold CV inside the outer training fold (fit and calibration parts together),
where candidates are *chosen*, and on the test fold (reported after the choice). Per candidate
the summary gives the mean accuracy over the sets, its std and worst set, the mean rule count,
the same-size CART's mean and the sets where compact wins or ties it (set means over folds,
ties within 0.05 points).

Examples
--------
The study of `ferl.presets` ("Compact"; 15 minutes on 2 shared cores)::

    python scripts/study_compact.py --out runs/compact \
        --candidate fixed partition=fixed gain=entropy min_samples_leaf=0.02 ccp_alpha=0 \
        --candidate learned partition=learned gain=entropy min_samples_leaf=0.02 ccp_alpha=0 \
        --candidate a005 partition=learned gain=entropy min_samples_leaf=0.02 ccp_alpha=0.005 \
        --candidate msl2_a005 partition=learned gain=entropy min_samples_leaf=2 ccp_alpha=0.005 \
        --candidate g_msl005_a002 ccp_alpha=0.002 \
        --candidate g_msl005_a005

Others::

    python scripts/study_compact.py --out runs/compact --datasets wine glass --folds 2 \
        --candidate gini partition=learned gain=gini

Per-fold rows go to ``<out>/folds.csv`` (rows already there are reused, so a run resumes) and the
summary to ``<out>/summary.md``.
"""

from __future__ import annotations

import argparse
import ast
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.model_selection import StratifiedKFold
from sklearn.tree import DecisionTreeClassifier
from threadpoolctl import threadpool_limits

from ferl import FERLClassifier
from ferl.benchmarks.keel import default_data_root, list_datasets, load_keel
from ferl.benchmarks.protocol import make_splits, scale_fold
from ferl.benchmarks.tables import markdown_table

#: Set means closer than this (in accuracy, a fraction) are a tie.
TIE = 0.0005


def _value(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def parse_args(argv=None) -> argparse.Namespace:
    """Command-line options (see ``--help``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--candidate", nargs="+", action="append", required=True,
                        metavar=("NAME", "PARAM=VALUE"),
                        help="a name and FERLClassifier parameters over variant='compact'")
    parser.add_argument("--datasets", nargs="+", default=None)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--inner", type=int, default=3,
                        help="folds of the CV inside each outer training fold (0: none)")
    parser.add_argument("--data-root", type=Path, default=None)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    args.candidates = {}
    for name, *pairs in args.candidate:
        params = {}
        for pair in pairs:
            key, sep, text = pair.partition("=")
            if not sep:
                parser.error(f"candidate {name}: expected PARAM=VALUE, got {pair!r}")
            params[key] = _value(text)
        args.candidates[name] = params
    return args


def _accuracy(model, X, y) -> float:
    return float(np.mean(model.predict(X) == y))


def _pair(params: dict, seed: int, X, y):
    """A candidate fitted on ``(X, y)`` and the CART with as many leaves as it has rules."""
    ferl = FERLClassifier("compact", random_state=seed, **params).fit(X, y)
    cart = DecisionTreeClassifier(max_leaf_nodes=max(ferl.n_rules_, 2), random_state=seed).fit(X, y)
    return ferl, cart


def _inner_cv(params: dict, seed: int, X, y, folds: int) -> tuple[float, float]:
    """Mean accuracy of a candidate and of its same-size CART over ``folds`` stratified folds of
    the outer training fold ``(X, y)`` (its fit and calibration parts)."""
    accs = []
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The least populated class", category=UserWarning)
        splits = list(StratifiedKFold(folds, shuffle=True, random_state=seed).split(X, y))
    for fit, held in splits:
        ferl, cart = _pair(params, seed, X[fit], y[fit])
        accs.append((_accuracy(ferl, X[held], y[held]), _accuracy(cart, X[held], y[held])))
    return tuple(np.mean(accs, axis=0))


def run_fold(data, params: dict, seed: int, inner: int = 0) -> dict:
    """Fit one candidate and its same-size CART on a fold; their accuracies and sizes (with
    ``inner`` > 1, also their ``inner``-fold CV accuracy inside the outer training fold)."""
    start = time.process_time()
    ferl, cart = _pair(params, seed, data.X_fit, data.y_fit)
    cpu = time.process_time() - start
    row = {"rules": ferl.n_rules_, "cpu_s": cpu,
           "cal": _accuracy(ferl, data.X_cal, data.y_cal), "test": _accuracy(ferl, data.X_test, data.y_test),
           "cart_cal": _accuracy(cart, data.X_cal, data.y_cal),
           "cart_test": _accuracy(cart, data.X_test, data.y_test)}
    if inner > 1:
        X, y = np.concatenate([data.X_fit, data.X_cal]), np.concatenate([data.y_fit, data.y_cal])
        row["inner"], row["cart_inner"] = _inner_cv(params, seed, X, y, inner)
    return row


def summarise(rows: pd.DataFrame) -> pd.DataFrame:
    """One line per candidate: means, spread and wins over the data sets (percent)."""
    lines = []
    for name, group in rows.groupby("candidate", sort=False):
        inner = [c for c in ("inner", "cart_inner") if c in group and group[c].notna().all()]
        per_set = group.groupby("dataset")[["cal", "test", "cart_cal", "cart_test", "rules", "cpu_s",
                                            *inner]].mean()
        diff = per_set["test"] - per_set["cart_test"]
        lines.append({
            "candidate": name, "sets": len(per_set),
            **{c: 100 * per_set[c].mean() for c in inner},
            "inner_wins_ties": (int((per_set["inner"] - per_set["cart_inner"] > -TIE).sum())
                                if inner else None),
            "cal": 100 * per_set["cal"].mean(), "cart_cal": 100 * per_set["cart_cal"].mean(),
            "test": 100 * per_set["test"].mean(), "std": 100 * per_set["test"].std(),
            "worst": f"{100 * per_set['test'].min():.1f} ({per_set['test'].idxmin()})",
            "rules": per_set["rules"].mean(), "cart_test": 100 * per_set["cart_test"].mean(),
            "wins_ties": int((diff > -TIE).sum()),
            "worst_vs_cart": f"{100 * diff.min():+.1f} ({diff.idxmin()})",
            "cpu_s": group["cpu_s"].sum(),
        })
    return pd.DataFrame(lines)


def main(argv=None) -> int:
    """Run (or resume) the study and write its tables; returns the exit status."""
    args = parse_args(argv)
    root = args.data_root or default_data_root()
    if root is None:
        print("error: no data root: pass --data-root or set FERL_DATA_ROOT", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "folds.csv"
    done = pd.read_csv(path) if path.is_file() else pd.DataFrame()
    seen = set(zip(done.get("candidate", []), done.get("dataset", []), done.get("fold", []), strict=True))
    rows = done.to_dict("records")
    with threadpool_limits(limits=1):
        for name in args.datasets or list_datasets(root):
            dataset = load_keel(root / f"{name}.dat")
            for split in make_splits(dataset.y, args.folds, args.seed):
                data = None
                for cand, params in args.candidates.items():
                    if (cand, name, split.fold) in seen:
                        continue
                    data = data or scale_fold(dataset.X, dataset.y, split, dataset.n_classes)
                    rows.append({"candidate": cand, "dataset": name, "fold": split.fold,
                                 **run_fold(data, params, args.seed, args.inner)})
                    pd.DataFrame(rows).to_csv(path, index=False)
            print(f"{name} done", flush=True)
    table = pd.DataFrame(rows)
    table = table[table["candidate"].isin(list(args.candidates))]
    summary = summarise(table)
    text = markdown_table(summary.round(2))
    (args.out / "summary.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
