"""Which training concepts should the heads be fitted on? In-sample vs cross-fitted, measured on val.

For each run directory holding ``concepts/{train,train_crossfit,val}.npz`` (``train-detector`` with
``crossfit_folds``; the open-world fold directories ``seed*/fold*`` qualify too), fits every head
on the detector's in-sample train concepts and on its cross-fitted (out-of-fold) ones, and scores
both on the **val** concepts, raw (the val split is out-of-sample for the detector, as test is, and
raw inputs do not use the val-fitted calibration). The test split is not read. Prints one row per
run and head, then per head the mean, standard deviation and worst run of the difference
(cross-fitted - in-sample, accuracy points). This chose ``fit-head``'s default
(``--train-concepts auto``).

    python scripts/compare_train_concepts.py runs/cub50_lite0 runs/openworld/cub50_lite0/seed*/fold* \\
        [--heads ferl-deep,ferl-medium,cart,lr] [--csv out.csv]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from cbm.data.concept_tables import load_concept_tables
from cbm.heads import make_head
from cbm.heads.fit import evaluate_head
from cbm.heads.train_concepts import crossfit_table


def compare(run: Path, heads: list[str], seed: int = 0) -> list[dict]:
    """Val accuracy of each head fitted on in-sample and on cross-fitted train concepts of ``run``."""
    tables = load_concept_tables(run, splits=("train", "val"))
    train, val = tables["train"], tables["val"]
    oof = crossfit_table(run, train)
    if oof is None:
        raise SystemExit(f"{run} has no concepts/train_crossfit.npz (train-detector --crossfit_folds 5)")
    names = np.asarray(train.class_names)
    seen = np.isin(val.y, np.unique(train.y))
    rows = []
    for head in heads:
        row = {"run": str(run), "head": head}
        for source, X in (("in-sample", train.probs), ("cross-fitted", oof.probs)):
            model = make_head(head, seed=seed).fit(X.astype(np.float64), names[train.y], train.concept_names)
            row[source] = 100 * evaluate_head(model, val.probs[seen], names[val.y[seen]])["accuracy"]
        row["difference"] = row["cross-fitted"] - row["in-sample"]
        rows.append(row)
        print(f"{run}  {head:<12} in-sample {row['in-sample']:6.2f}  "
              f"cross-fitted {row['cross-fitted']:6.2f}  ({row['difference']:+.2f})", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run directories with cross-fitted tables")
    parser.add_argument("--heads", default="ferl-deep,ferl-medium,cart,lr")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--csv", type=Path, default=None, help="write the rows here")
    args = parser.parse_args()
    frame = pd.DataFrame([r for run in args.runs for r in compare(run, args.heads.split(","), args.seed)])
    if args.csv:
        frame.to_csv(args.csv, index=False)
    summary = frame.groupby("head")["difference"].agg(["mean", "std", "min", "max", "count"])
    print("\ncross-fitted - in-sample, val accuracy points, over runs:")
    print(summary.round(2).to_string())


if __name__ == "__main__":
    main()
