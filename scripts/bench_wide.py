"""FERL-deep fit time on wide inputs (few rows, many features): the diagonal leaf Gaussians against the
full-covariance ones, side by side (`ferl.novelty.leaf_fit`).

With fewer training rows than features the fit keeps the leaf Gaussians' variances only; the full
covariances it used before cost d x d memory and d^3 time per distinct correlation matrix. For each
width d this prints the CPU time of one fit (one thread: run with ``OMP_NUM_THREADS=1``), the
diagonal one and, up to ``--full-up-to``, the full one (forced by lifting the rule), their ratio,
and each one's growth from the previous width (linear: the width ratio). The numba warm-up of both
is run before the first row. The full fit at 2 x 10,000 takes minutes (docs/results/speed.md).

    OMP_NUM_THREADS=1 python scripts/bench_wide.py [--n 2] [--widths 500 1000 2000 5000 10000]
                                                   [--full-up-to 2000]
"""

from __future__ import annotations

import argparse
import os
import time
from unittest import mock

import numpy as np

from ferl import FERLClassifier
from ferl.novelty import leaf_gaussians


def fit_seconds(n: int, d: int, full: bool, seed: int = 0) -> tuple[float, tuple]:
    """CPU seconds of a FERL-deep fit on ``n`` random rows of ``d`` features, and the shape of its
    leaf covariances; ``full`` forces the full covariances."""
    rng = np.random.default_rng(seed)
    X, y = rng.random((n, d)), np.arange(n) % 2
    rule = (lambda sw, d: False) if full else leaf_gaussians.diagonal_leaves
    with mock.patch.object(leaf_gaussians, "diagonal_leaves", rule):
        start = time.process_time()
        clf = FERLClassifier(variant="deep", random_state=seed).fit(X, y)
        return time.process_time() - start, clf.leaf_gaussians_.cov.shape


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2, help="training rows")
    parser.add_argument("--widths", type=int, nargs="+", default=[500, 1000, 2000, 5000, 10000])
    parser.add_argument("--full-up-to", type=int, default=2000, help="widest full-covariance fit timed")
    args = parser.parse_args(argv)
    if os.environ.get("OMP_NUM_THREADS") != "1":
        print("note: OMP_NUM_THREADS is not 1: BLAS may use several threads")
    for full in (False, True):  # numba compilation / cache loading, not timed
        fit_seconds(args.n, 8, full)
    print(f"FERL-deep fit, {args.n} rows, CPU seconds (one thread)")
    print(f"{'d':>7} {'d growth':>8} {'diagonal':>9} {'growth':>7} {'full':>9} {'growth':>7} {'full/diag':>9}"
          "  covariances")
    last: dict[str, float] = {}
    for d in args.widths:
        diag, shape = fit_seconds(args.n, d, full=False)
        full = fit_seconds(args.n, d, full=True)[0] if d <= args.full_up_to else float("nan")
        growth = {k: v / last[k] if k in last and last[k] > 0 else float("nan")
                  for k, v in (("diag", diag), ("full", full))}
        print(f"{d:>7} {d / last.get('d', np.nan):>8.2f} {diag:>9.2f} {growth['diag']:>7.2f} {full:>9.2f} "
              f"{growth['full']:>7.2f} {full / diag:>9.1f}  {shape}")
        last = {"d": d, "diag": diag, "full": full}


if __name__ == "__main__":
    main()
