"""How much does the product head certify, and does any certified radius break? On a run's test split.

For the run's FERL head (``ferl-deep``, calibrated inputs: the product's) the certified l_inf radius
of every test image in concept units (`cbm.heads.operating.certified_radius`: the concepts stay in
[0, 1]) gives the share of images with a radius above 0 and its quantiles. Then, on up to
``--images`` of the images with a radius above 0 (a seeded sample), ``--points`` perturbed concept
vectors per image, half random points of the l_inf box of that radius and half random vertices of
it, each clipped to [0, 1], are classified by the head: a violation is a perturbed vector whose
class differs from the image's. The script prints the figures and the seconds each part took.

Examples
--------
    python scripts/bench_certificate.py runs/cub50_lite0
    python scripts/bench_certificate.py runs/cub50_lite0 --images 1000 --points 2000
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from cbm.heads.operating import certified_radius
from cbm.report.run import load_run


def perturbations(x: np.ndarray, radius: float, n_points: int, rng: np.random.Generator) -> np.ndarray:
    """``n_points`` concept vectors in the l_inf box of ``radius`` around ``x``, clipped to [0, 1]:
    the first half uniform in the box, the rest random vertices (every concept moved by +-radius)."""
    half = n_points // 2
    inside = rng.uniform(-1.0, 1.0, size=(half, x.size))
    corners = rng.choice([-1.0, 1.0], size=(n_points - half, x.size))
    return np.clip(x + radius * np.vstack([inside, corners]), 0.0, 1.0)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dir")
    p.add_argument("--head", default="ferl-deep")
    p.add_argument("--inputs", default="calibrated")
    p.add_argument("--images", type=int, default=300, help="certified images checked (a seeded sample)")
    p.add_argument("--points", type=int, default=1000, help="perturbed vectors per checked image")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    run = load_run(args.run_dir)
    head = run.head(args.head, args.inputs)
    X = run.concepts("test", args.inputs)
    start = time.perf_counter()
    radius = certified_radius(head, X)
    took = time.perf_counter() - start
    labels = head.predict(X)
    q = np.quantile(radius, [0.1, 0.25, 0.5, 0.75, 0.9])
    print(f"run {args.run_dir}, head {args.head}/{args.inputs}, {len(X)} test images, "
          f"{X.shape[1]} concepts")
    print(f"radius > 0: {(radius > 0).mean():.1%} of the images; inf: {np.isinf(radius).sum()}")
    print("radius quantiles 10/25/50/75/90 %: " + ", ".join(f"{v:.4g}" for v in q))
    print(f"median radius of the certified images: {np.median(radius[radius > 0]):.4g}")
    print(f"certificate: {took:.2f} s for {len(X)} images")
    rng = np.random.default_rng(args.seed)
    certified = np.flatnonzero(radius > 0)
    checked = np.sort(rng.choice(certified, size=min(args.images, certified.size), replace=False))
    start = time.perf_counter()
    violations, worst = 0, 0
    for i in checked:
        r = min(radius[i], 1.0)  # a box of radius 1 already covers [0, 1]
        moved = head.predict(perturbations(X[i], r, args.points, rng))
        bad = int((moved != labels[i]).sum())
        violations += bad
        worst = max(worst, bad)
    print(f"checked {checked.size} certified images x {args.points} points (half random points, half "
          f"random vertices of the box, clipped to [0, 1]): {violations} violations "
          f"(most in one image: {worst}); {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
