"""How much does the product head certify, and does any certified radius break? On a run's test split.

For the run's FERL head (``ferl-deep``, calibrated inputs: the product's) the certified l_inf radius
of every test image's decision in concept units (`cbm.heads.operating.certified_radius`: the
concepts stay in [0, 1]) gives the share of images with a radius above 0 and its quantiles, beside
the same certificate without the [0, 1] domain (the box unbounded), and the paper's certificate of
the tree's ``P_T`` for the run's FERL heads of the tree's evidence (compact, medium) with and without
the domain. Then, on up to ``--images`` of
the images with a radius above 0 (a seeded sample), ``--points`` perturbed concept vectors per
image, half random points of the l_inf box of that radius and half random vertices of it, each
clipped to [0, 1], are decided by the product (`cbm.heads.operating.decide`, with the image's
feature score): a violation is a perturbed vector whose class differs from the image's. The share
of images whose radius covers the l_inf distance from their concepts to their concept labels is
the share whose decision on the detected concepts is certified to be the one on the labels. Last, on
``--attack`` of the checked images, a greedy search over the box's vertices (concept by concept,
the value that most lowers the class's lead in BetP) must not flip the class within the radius;
the direction it finds, scaled up, flips it at some multiple of the radius: how far the radius is
from a counterexample. The script prints the figures and the seconds each part took.

Examples
--------
    python scripts/bench_certificate.py runs/cub50_lite0
    python scripts/bench_certificate.py runs/cub50_lite0 --images 1000 --points 2000 --attack 100
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from cbm.heads.operating import certified_radius, decide
from cbm.report.run import load_run

#: Heads of the tree's evidence whose certificate (paper appendix A.3) is shown with and without the domain.
TREE_HEADS = ("ferl-compact", "ferl-medium")
#: Multiples of the radius the attack's direction is scaled to, in turn, until the class flips.
MULTIPLES = (1.01, 1.02, 1.05, 1.1, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0)


def perturbations(x: np.ndarray, radius: float, n_points: int, rng: np.random.Generator) -> np.ndarray:
    """``n_points`` concept vectors in the l_inf box of ``radius`` around ``x``, clipped to [0, 1]:
    the first half uniform in the box, the rest random vertices (every concept moved by +-radius)."""
    half = n_points // 2
    inside = rng.uniform(-1.0, 1.0, size=(half, x.size))
    corners = rng.choice([-1.0, 1.0], size=(n_points - half, x.size))
    return np.clip(x + radius * np.vstack([inside, corners]), 0.0, 1.0)


def attack(head, x: np.ndarray, radius: float, top: int, rng: np.random.Generator) -> tuple[bool, float]:
    """Greedy search of the box's vertices (two passes over the concepts in random order): whether it
    flips the class within ``radius``, and the smallest of `MULTIPLES` of its direction that flips
    it (inf: none)."""

    def lead(Z):
        p = head.predict_proba(Z)
        return p[:, top] - np.delete(p, top, axis=1).max(axis=1)

    z = x.copy()
    for _ in range(2):
        for f in rng.permutation(x.size):
            cand = np.tile(z, (3, 1))
            cand[:, f] = np.clip(x[f] + radius * np.array([-1.0, 0.0, 1.0]), 0.0, 1.0)
            z = cand[np.argmin(lead(cand))]
    inside = bool(lead(z[None])[0] <= 0)
    scaled = np.clip(x + np.array(MULTIPLES)[:, None] * (z - x), 0.0, 1.0)
    flips = np.flatnonzero(lead(scaled) <= 0)
    return inside, float(MULTIPLES[flips[0]]) if flips.size else np.inf


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dir")
    p.add_argument("--head", default="ferl-deep")
    p.add_argument("--inputs", default="calibrated")
    p.add_argument("--images", type=int, default=300, help="certified images checked (a seeded sample)")
    p.add_argument("--points", type=int, default=1000, help="perturbed vectors per checked image")
    p.add_argument("--attack", type=int, default=50, help="checked images also attacked greedily")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    run = load_run(args.run_dir)
    head = run.head(args.head, args.inputs)
    X = run.concepts("test", args.inputs)
    feature = run.tables["test"].feature_score
    start = time.perf_counter()
    radius = certified_radius(head, X)
    took = time.perf_counter() - start
    free = head.model_.robustness_radius(head._check_X(X))  # the unbounded box
    decided = decide(head, X, feature).evidence.pignistic.argmax(axis=1)
    q = np.quantile(radius, [0.1, 0.25, 0.5, 0.75, 0.9])
    print(f"run {args.run_dir}, head {args.head}/{args.inputs}, {len(X)} test images, "
          f"{X.shape[1]} concepts")
    print(f"radius > 0: {(radius > 0).mean():.1%} of the images; inf: {np.isinf(radius).sum()}")
    print("radius quantiles 10/25/50/75/90 %: " + ", ".join(f"{v:.4g}" for v in q))
    print(f"median radius of the certified images: {np.median(radius[radius > 0]):.4g}")
    print(f"without the [0, 1] domain: radius > 0 for {(free > 0).mean():.1%}, median {np.median(free):.4g}")
    error = np.abs(X - run.tables["test"].concept_labels).max(axis=1)  # to the labels, l_inf
    print(f"the radius covers the l_inf distance to the image's concept labels (median "
          f"{np.median(error):.3g}) for {(radius >= error).mean():.1%} of the images")
    print(f"certificate: {took:.2f} s for {len(X)} images")
    for name in sorted(set(run.heads()) & set(TREE_HEADS)):  # the paper's certificate, of P_T's class
        model = run.head(name, args.inputs).model_
        paper, bounded = model.robustness_radius(X), model.robustness_radius(X, domain=(0.0, 1.0))
        print(f"{name} (the tree's evidence; P_T's class, not the decision's): radius > 0 for "
              f"{(paper > 0).mean():.1%} unbounded, {(bounded > 0).mean():.1%} in [0, 1] (median "
              f"{np.median(bounded):.3g})")
    rng = np.random.default_rng(args.seed)
    certified = np.flatnonzero(radius > 0)
    checked = np.sort(rng.choice(certified, size=min(args.images, certified.size), replace=False))
    start = time.perf_counter()
    violations, worst = 0, 0
    for i in checked:
        r = min(radius[i], 1.0)  # a box of radius 1 already covers [0, 1]
        score = None if feature is None else np.full(args.points, feature[i])
        moved = decide(head, perturbations(X[i], r, args.points, rng), score).evidence.pignistic
        bad = int((moved.argmax(axis=1) != decided[i]).sum())
        violations += bad
        worst = max(worst, bad)
    print(f"checked {checked.size} certified images x {args.points} points (half random points, half "
          f"random vertices of the box, clipped to [0, 1]), decided with the image's feature score: "
          f"{violations} violations (most in one image: {worst}); {time.perf_counter() - start:.1f} s")
    start = time.perf_counter()
    attacked = checked[:args.attack]
    found = [attack(head, X[i], min(radius[i], 1.0), int(decided[i]), rng) for i in attacked]
    if found:
        multiples = np.array([m for _, m in found])
        print(f"greedy attack on {attacked.size} of them: {sum(inside for inside, _ in found)} flips within "
              f"the radius; its direction flips the class at a median {np.median(multiples):.3g} x the "
              f"radius (quartiles {np.quantile(multiples, 0.25):.3g}, {np.quantile(multiples, 0.75):.3g}; "
              f"none up to {MULTIPLES[-1]:g} x: {np.isinf(multiples).sum()}); "
              f"{time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
