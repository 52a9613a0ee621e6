"""Tabular benchmark: FERL and baselines on KEEL data sets, beside the paper's numbers.

Examples
--------
    python scripts/bench_tabular.py --quick --out runs/bench-quick
    python scripts/bench_tabular.py --data-root /data/tabular --out runs/bench-full
    python scripts/bench_tabular.py --datasets wine glass --folds 3 --out runs/bench-small

The protocol lives in :mod:`ferl.benchmarks`; this script only parses arguments.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from ferl.benchmarks.keel import default_data_root
from ferl.benchmarks.methods import METHODS
from ferl.benchmarks.report import write_report
from ferl.benchmarks.runner import QUICK_DATASETS, BenchmarkConfig, run_benchmark


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options (see ``--help``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-root", type=Path, default=None,
                        help="folder of <name>.dat files (default: $FERL_DATA_ROOT/tabular, then "
                             "../shared/data/tabular when present)")
    parser.add_argument("--datasets", nargs="+", default=None, help="names (default: all)")
    parser.add_argument("--folds", type=int, default=None, help="outer folds (default 5; 2 quick)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true",
                        help=f"{len(QUICK_DATASETS)} data sets ({', '.join(QUICK_DATASETS)}), "
                             "2 folds")
    parser.add_argument("--methods", nargs="+", default=None, choices=list(METHODS))
    parser.add_argument("--ood-max-classes", type=int, default=None,
                        help="hold out at most this many classes per fold in the OOD study")
    parser.add_argument("--no-ood", action="store_true", help="skip the OOD study")
    parser.add_argument("--no-ablations", action="store_true", help="skip the ablations")
    parser.add_argument("--no-shift", action="store_true", help="skip the covariate-shift study")
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and write the report; returns the exit status."""
    args = parse_args(argv)
    root = args.data_root or default_data_root()
    if root is None:
        print("error: no data root: pass --data-root or set FERL_DATA_ROOT", file=sys.stderr)
        return 2
    datasets = args.datasets or (list(QUICK_DATASETS) if args.quick else None)
    config = BenchmarkConfig(
        data_root=root, datasets=datasets, folds=args.folds or (2 if args.quick else 5),
        seed=args.seed, methods=args.methods, ood=not args.no_ood,
        ablations=not args.no_ablations, shift=not args.no_shift,
        ood_max_classes=args.ood_max_classes,
    )
    result = run_benchmark(config)
    command = shlex.join(["python", "scripts/bench_tabular.py", *(argv or sys.argv[1:])])
    report = write_report(result, args.out, command)
    print(f"wrote {report} ({result.elapsed:.1f} s)")
    for note in result.notes:
        print(f"note: {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
