"""How the operating point's shift settings were chosen: leave-one-corruption-out on the validation
corruptions of a run (never the evaluated ones, never the test split).

For each of ImageNet-C's four validation corruptions in turn (the run's ``concepts/val_shift.npz``),
the product head's operating point (`cbm.heads.operating.fit_operating_point`) is fitted on the clean
val rows and the other three corruptions, and scored on the held-out one: coverage, answered right,
answered set size and abstention by severity (means over the four held-out corruptions), and the
shift score's detection AUROC (clean val rows against the held-out corruption's). Grids: the weight
``w`` of the head's novelty in the shift score, the widening's bins, and ``max_set_size``.

    python scripts/study_shift.py runs/cub50_lite0 [--head ferl-deep] [--inputs calibrated]

Figures and the choice: docs/results/shift.md.
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path

import numpy as np
import pandas as pd

from cbm.concepts.calibration import crossfit_calibrate
from cbm.data.concept_tables import SHIFT_SPLIT, load_concept_table, load_concept_tables
from cbm.heads import load_head
from cbm.heads.operating import decide, fit_operating_point
from ferl.metrics import ood_auroc

WEIGHTS = (0.0, 0.25, 0.5, 1.0, 2.0)
BINS = (10, 15, 25)
SIZES = (5, 8, 10, 12, 15, 20)


def load(run: Path, head_name: str, inputs: str, seed: int):
    """The head, the clean val rows and the shift rows, calibrated out of sample as fit-head does."""
    tables = load_concept_tables(run)
    val, shift = tables["val"], load_concept_table(run / "concepts" / f"{SHIFT_SPLIT}.npz")
    names, classes = val.concept_names, np.asarray(val.class_names)
    where = {s: i for i, s in enumerate(val.sample_ids.tolist())}
    rows = np.array([where[s] for s in shift.shift["source_ids"].tolist()])
    if inputs == "calibrated":
        X_val, X_sh = crossfit_calibrate(val.probs, val.concept_labels, names, seed=seed,
                                         extra=(shift.probs, rows))
    else:
        X_val, X_sh = val.probs.astype(np.float64), shift.probs.astype(np.float64)
    head = load_head(run / "head" / head_name / inputs)
    columns = shift.shift
    shifted = (X_sh, classes[shift.y], shift.feature_score, columns["corruption"], columns["severity"])
    return head, (X_val, classes[val.y], val.feature_score), shifted


def lofo(head, clean, shifted, weight: float, bins: int, sizes=(10,)) -> pd.DataFrame:
    """Leave-one-corruption-out rows: (held-out corruption, severity, max_set_size) -> metrics."""
    X_sh, y_sh, f_sh, corruption, severity = shifted
    out = []
    for held in sorted(set(corruption.tolist())):
        fit = corruption != held
        h = copy.copy(head)
        fit_operating_point(h, *clean, (X_sh[fit], y_sh[fit], f_sh[fit]), max_set_size=max(sizes),
                            shift_weight=weight, n_bins=bins)
        clean_u = decide(h, clean[0], clean[2]).shift_score
        test = ~fit
        dec = decide(h, X_sh[test], f_sh[test])
        y = h.class_index(y_sh[test])
        width = dec.sets.sum(axis=1)
        hit = dec.sets[np.arange(y.size), y]
        for s in sorted(set(severity[test].tolist())):
            m = severity[test] == s
            row = {"held_out": held, "severity": s, "detect_auroc": ood_auroc(clean_u, dec.shift_score[m])}
            for k in sizes:
                ab = dec.abstained[m] | (width[m] > k)
                out.append({**row, "max_set_size": k, "coverage": float((hit[m] | ab).mean()),
                            "answered_right": float((hit[m] & ~ab).mean()), "abstention": float(ab.mean()),
                            "set_size": float(width[m][~ab].mean()) if (~ab).any() else np.nan})
    return pd.DataFrame(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path)
    p.add_argument("--head", default="ferl-deep")
    p.add_argument("--inputs", default="calibrated")
    p.add_argument("--seed", type=int, default=0, help="fit-head's seed (the val rows' cross-fitting)")
    args = p.parse_args()
    head, clean, shifted = load(args.run, args.head, args.inputs, args.seed)
    pd.set_option("display.width", 200)
    print("Shift-score weight w and widening bins (max_set_size 10), mean over the held-out corruptions:")
    rows = []
    for w in WEIGHTS:
        for bins in BINS:
            frame = lofo(head, clean, shifted, w, bins)
            mean = frame.groupby("severity")[["coverage", "answered_right", "set_size", "abstention"]].mean()
            rows.append({"w": w, "bins": bins, "detect_auroc": frame.detect_auroc.mean(),
                         **{f"{c}@{s}": mean.loc[s, c] for s in (1, 3, 5) if s in mean.index
                            for c in ("coverage", "answered_right", "set_size", "abstention")},
                         "min_coverage": frame.groupby(["held_out", "severity"]).coverage.mean().min()})
    print(pd.DataFrame(rows).round(3).to_string(index=False))
    print("\nmax_set_size (w = 0.5, 15 bins):")
    frame = lofo(head, clean, shifted, 0.5, 15, SIZES)
    table = frame.groupby(["max_set_size", "severity"])[["coverage", "answered_right", "set_size",
                                                         "abstention"]].mean().round(3)
    print(table.to_string())


if __name__ == "__main__":
    main()
