"""The tabular benchmark's FERL-deep rows with the novelty discount off and on, side by side.

Usage::

    python scripts/bench_novelty_tabular.py [--datasets wine glass ...] [--folds 5] [--out DIR]

Runs `ferl.benchmarks.runner.run_benchmark` (the protocol of ``scripts/bench_tabular.py``: 5
outer folds, seed 0, the leave-one-class-out OOD study on the multiclass sets) with FERL-deep and
``ferl-deep-discount`` (FERL-deep with ``novelty_discount=True``; the same fitted trees) and
prints: Table 1's accuracy, set coverage and mean set size of both (means over data sets of the
fold means), and Table 3's AUROC of every OOD detector and FERL kind (mean, std and worst data
set), the discounted ignorance included. Optionally writes the raw rows as CSV under ``--out``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ferl.benchmarks import methods
from ferl.benchmarks.keel import default_data_root
from ferl.benchmarks.runner import BenchmarkConfig, run_benchmark


def _discounted(seed: int) -> methods.Method:
    from ferl import FERLClassifier

    return methods.Method(FERLClassifier(variant="deep", random_state=seed, novelty_discount=True),
                          size=lambda est: est.n_rules_, native_sets=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=None)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    methods.METHODS["ferl-deep-discount"] = methods.MethodSpec(
        "ferl-deep-discount", "FERL-deep (discount)", _discounted, True, "ferl")
    config = BenchmarkConfig(data_root=default_data_root(), datasets=args.datasets, folds=args.folds,
                             seed=0, methods=["ferl-deep", "ferl-deep-discount"], ood=True,
                             ablations=False, shift=False)
    result = run_benchmark(config)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        result.main.to_csv(args.out / "main.csv", index=False)
        result.ood.to_csv(args.out / "ood.csv", index=False)
    main_rows = result.main
    cols = [c for c in ("accuracy", "coverage", "set_size") if c in main_rows]
    per_set = main_rows.groupby(["method", "dataset"])[cols].mean()
    print(per_set.groupby("method").mean().round(4).to_string())
    auroc = result.ood.groupby(["detector", "dataset"])["auroc"].mean().mul(100)
    table = auroc.groupby("detector").agg(["mean", "std", "min", "count"]).sort_values("mean")
    print(table.round(2).to_string())


if __name__ == "__main__":
    main()
