"""``make demo``: the whole pipeline on the embedded synthetic concept world, then ``runs/demo/report.md``.

Trains the concept detector (``train-detector``), fits the calibrated heads (``fit-head``), runs
one fold of the open-world protocol (``evaluate-openworld``) and the concept interventions
(``evaluate-interventions``) and writes the report with example explanations (``cbm.report``);
its run times, quiet and beside other jobs, are in docs/results/demo.md ("Run times"). Running it again
starts a new run (the finished one stays in ``runs/demo.previous`` until the new one completes);
an interrupted run is resumed. The steps and the re-run rules are in :mod:`cbm.demo`.

Examples
--------
    python scripts/demo.py                      # = make demo
    python scripts/demo.py --fresh              # discard an interrupted run instead of resuming it
    python scripts/demo.py --profile tiny --out runs/demo-tiny    # seconds-long smoke run
"""

from __future__ import annotations

import argparse
import time

from cbm.demo import PROFILES, headline, run_demo
from cbm.detector.train import quiet_library_noise
from cbm.runtime import set_threads


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options (see ``--help``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/demo", help="run directory (default runs/demo)")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="demo",
                        help="demo (default) or tiny (a seconds-long smoke run)")
    parser.add_argument("--fresh", action="store_true", help="discard an unfinished run instead of resuming")
    parser.add_argument("--threads", type=int, default=None,
                        help="CPU threads of torch, numba and BLAS in every step (default: the cores this "
                             "process may use)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Run the demo; print the headline numbers and where the report is."""
    args = parse_args(argv)
    quiet_library_noise()
    start = time.perf_counter()
    try:
        set_threads(args.threads)
        report = run_demo(args.out, PROFILES[args.profile], fresh=args.fresh, threads=args.threads)
    except KeyboardInterrupt:
        raise SystemExit(f"\ninterrupted: run the demo again to resume the run in {args.out}") from None
    except (FileExistsError, FileNotFoundError, ValueError) as err:
        raise SystemExit(f"demo: error: {err}") from err
    print("\n" + "\n".join(headline(report.parent)))
    print(f"\nDemo finished in {time.perf_counter() - start:.0f} s. Report: {report}")


if __name__ == "__main__":
    main()
