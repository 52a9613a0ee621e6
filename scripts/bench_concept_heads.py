"""How should FERL be set on concept vectors? Cross-validation on a run's TRAIN split only.

Reads ``concepts/train_crossfit.npz`` (or ``train.npz`` with ``--in-sample``) and the run's
``calibration.json`` (fitted on val by ``fit-head``), and scores each candidate by stratified k-fold
cross-validation on the calibrated train concepts; the val and test splits are not read. Prints, per
candidate, the mean accuracy (fold std) and, for FERL, the mean ignorance, abstention rate (all-class
credal sets) and u65 of the credal sets. This chose `cbm.heads.models.CONCEPT_SETTINGS`:

    python scripts/bench_concept_heads.py runs/cub50_lite0 [--seeds 0 1 2] [--folds 5]

``--openworld FOLD_DIR`` instead compares the two settings of the FERL-deep head on one fold of
``evaluate-openworld`` (its ``concepts/{train_crossfit,val,test,novel}.npz``, calibration fitted on
its val as the protocol does): retained-test accuracy and the OOD AUROC (test vs novel) per score
(the product's kinds and the ablation kinds of `ferl.benchmarks.ood_kinds`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import StratifiedKFold
from sklearn.tree import DecisionTreeClassifier

from cbm.concepts.calibration import ConceptCalibrator
from cbm.data.concept_tables import load_concept_table
from cbm.heads import make_head
from ferl import FERLClassifier
from ferl import metrics as M
from ferl.benchmarks.ood import ferl_score

#: (label, factory) of every candidate; FERL candidates are the preset plus these parameters.
BANDS = dict(min_samples_leaf=1)
CANDIDATES = [
    ("cart", lambda: DecisionTreeClassifier(random_state=0)),
    ("lr", lambda: LogisticRegression(max_iter=2000)),
    ("ferl-medium preset", lambda: FERLClassifier("medium", random_state=0)),
    ("ferl-medium min_width 0.5", lambda: FERLClassifier("medium", random_state=0, min_width=0.5)),
    ("ferl-deep preset", lambda: FERLClassifier("deep", random_state=0)),
    *[(f"ferl-deep min_width {w}", lambda w=w: FERLClassifier("deep", random_state=0, min_width=w))
      for w in (0.1, 0.2, 0.3, 0.5, 0.7)],
    *[(f"ferl-deep min_width {w} min_samples_leaf 1 rules_per_class {r}",
       lambda w=w, r=r: FERLClassifier("deep", random_state=0, min_width=w, rules_per_class=r, **BANDS))
      for w in (0.4, 0.5, 0.6) for r in (4, 8, 16)],
]


def cross_validate(make, X, y, folds: int, seeds) -> dict:
    """Mean / std accuracy (and FERL credal metrics) over ``seeds`` x ``folds`` stratified folds."""
    rows = []
    for seed in seeds:
        for fit, test in StratifiedKFold(folds, shuffle=True, random_state=seed).split(X, y):
            model = make().fit(X[fit], y[fit])
            row = [np.mean(model.predict(X[test]) == y[test])]
            if isinstance(model, FERLClassifier):
                idx = np.searchsorted(model.classes_, y[test])
                sets = model.predict_set(X[test])
                row += [model.evidence(X[test]).ignorance.mean(), sets.all(axis=1).mean(),
                        M.u65(idx, sets)]
            rows.append(row)
    acc = np.array([r[0] for r in rows])
    out = {"accuracy": 100 * acc.mean(), "std": 100 * acc.std()}
    if len(rows[0]) > 1:
        means = 100 * np.mean([r[1:] for r in rows], axis=0)
        out.update(zip(("ignorance", "abstention", "u65"), means, strict=True))
    return out


def openworld_fold(fold: Path) -> None:
    """Print FERL-deep's accuracy and OOD AUROC per score on one open-world fold, per setting."""
    parts = ("train_crossfit", "val", "test", "novel")
    t = {p: load_concept_table(fold / "concepts" / f"{p}.npz") for p in parts}
    names, classes = t["val"].concept_names, np.asarray(t["val"].class_names)
    cal = ConceptCalibrator().fit(t["val"].probs, t["val"].concept_labels, names)
    X = {p: cal.transform(table.probs.astype(np.float64), names) for p, table in t.items()}
    for settings in ("learner", "concepts"):
        head = make_head("ferl-deep", 0, settings=settings)
        head.fit(X["train_crossfit"], classes[t["train_crossfit"].y], names)
        acc = 100 * np.mean(head.predict(X["test"]) == classes[t["test"].y])
        line = f"{settings:<9} test accuracy {acc:5.1f}  AUROC"
        for kind in ("typical", "leaf", "prototype", "nll", "residual", "combined", "ignorance", "firing"):
            a, b = ferl_score(head.model_, X["test"], kind), ferl_score(head.model_, X["novel"], kind)
            auroc = roc_auc_score(np.r_[np.zeros(a.size), np.ones(b.size)], np.r_[a, b])
            line += f"  {kind} {100 * auroc:5.1f}"
        print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="run directory with concepts/ and calibration.json")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--in-sample", action="store_true", help="use concepts/train.npz")
    parser.add_argument("--openworld", action="store_true", help="RUN is an evaluate-openworld fold folder")
    args = parser.parse_args()
    if args.openworld:
        openworld_fold(args.run)
        return
    split = "train" if args.in_sample else "train_crossfit"
    table = load_concept_table(args.run / "concepts" / f"{split}.npz")
    calibrator = ConceptCalibrator.load(args.run / "calibration.json")
    X = calibrator.transform(table.probs.astype(np.float64), table.concept_names)
    for label, make in CANDIDATES:
        r = cross_validate(make, X, table.y, args.folds, args.seeds)
        extra = "".join(f"  {k} {r[k]:5.1f}" for k in ("ignorance", "abstention", "u65") if k in r)
        print(f"{label:<58} {r['accuracy']:5.1f} ({r['std']:.1f}){extra}", flush=True)


if __name__ == "__main__":
    main()
