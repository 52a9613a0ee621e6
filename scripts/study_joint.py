"""How FERL's ``joint`` OOD score joins its two signals: the variants measured on stored open-world
scores (`ferl.novelty.ood_score`; docs/results/novelty.md).

Usage::

    python scripts/study_joint.py ROOT [ROOT ...] [--rate 0.035]

``ROOT`` is an ``evaluate-openworld`` output folder; every ``seed<s>/fold<f>/scores.npz`` in it is
read (the FERL head's ``typical`` and ``energy`` scores and the baselines' scores of the retained
val, retained test and held-out test images). Each variant joins ``typical`` and ``energy`` with
the retained **val** rows as reference, as ``calibrate_novelty`` does: ``z`` (the shipped one: each
standardised by its mean and standard deviation, summed), ``z-robust`` (median and IQR), ``z-log``
(``log1p`` of ``typical`` first), ``z-clip`` (``typical``'s part capped at 3), ``fisher`` (the sum of
both tails' ``-log`` p-values among the val rows). Printed per ROOT: AUROC (held-out images
positive) and the share of held-out images flagged when ``--rate`` of the retained test images are
(the novelty discount's operating point), mean over seeds and folds, beside the two signals alone
and the baselines. Reads stored scores only (seconds).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from ferl.metrics import ood_auroc

PARTS = ("val", "test", "novel")
BASELINES = ("mahalanobis", "knn", "iforest", "lr-msp", "lr-entropy", "lr-energy")


def _tail(reference: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Upper-tail p-value of ``s`` among ``reference`` (with the +1 of a conformal p-value)."""
    ref = np.sort(reference)
    return (ref.size - np.searchsorted(ref, s, side="left") + 1) / (ref.size + 1)


def variants(t: dict, e: dict) -> dict[str, dict[str, np.ndarray]]:
    """The joined scores of the module docstring, per part, from ``typical`` and ``energy`` per part."""
    def z(a, centre, scale):
        return {p: (a[p] - centre(a["val"])) / scale(a["val"]) for p in PARTS}

    def iqr(x):
        return np.subtract(*np.percentile(x, [75, 25]))

    std_t, std_e = z(t, np.mean, np.std), z(e, np.mean, np.std)
    rob_t, rob_e = z(t, np.median, iqr), z(e, np.median, iqr)
    log_t = z({p: np.log1p(t[p]) for p in PARTS}, np.mean, np.std)
    return {
        "z": {p: std_t[p] + std_e[p] for p in PARTS},
        "z-robust": {p: rob_t[p] + rob_e[p] for p in PARTS},
        "z-log": {p: log_t[p] + std_e[p] for p in PARTS},
        "z-clip": {p: np.minimum(std_t[p], 3.0) + std_e[p] for p in PARTS},
        "fisher": {p: -np.log(_tail(t["val"], t[p])) - np.log(_tail(e["val"], e[p])) for p in PARTS},
    }


def study(root: Path, rate: float) -> dict[str, np.ndarray]:
    """Score name -> (folds, 2) array of AUROC and held-out share flagged at ``rate``."""
    found: dict[str, list] = {}
    for path in sorted(root.glob("seed*/fold*/scores.npz")):
        stored = np.load(path)
        names = [str(n) for n in stored["detectors"]]

        def part(name, stored=stored, names=names):
            return {p: stored[f"scores_{p}"][:, names.index(name)] for p in PARTS}

        scores = {"typical": part("ferl-deep:typical"), "energy": part("ferl-deep:energy")}
        scores |= variants(scores["typical"], scores["energy"])
        scores |= {b: part(b) for b in BASELINES if b in names}
        for name, s in scores.items():
            flagged = float(np.mean(s["novel"] > np.quantile(s["test"], 1.0 - rate)))
            found.setdefault(name, []).append((ood_auroc(s["test"], s["novel"]), flagged))
    if not found:
        raise SystemExit(f"{root}: no seed*/fold*/scores.npz (run evaluate-openworld first)")
    return {name: np.asarray(v) for name, v in found.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("roots", nargs="+", type=Path)
    parser.add_argument("--rate", type=float, default=0.035, help="retained test share flagged")
    args = parser.parse_args()
    for root in args.roots:
        table = study(root, args.rate)
        print(f"\n{root} ({len(next(iter(table.values())))} folds)\n")
        print(f"| score | AUROC | held-out flagged at {100 * args.rate:g} % retained |\n|---|---:|---:|")
        for name, v in table.items():
            print(f"| {name} | {100 * v[:, 0].mean():.1f} | {100 * v[:, 1].mean():.1f} |")


if __name__ == "__main__":
    main()
