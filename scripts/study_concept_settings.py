"""Cross-validate a FERL head's concept settings on a run's train concepts
(docs/results/real-heads.md).

The study that chose ``cbm.heads.models.CONCEPT_SETTINGS`` (``--variant``, default deep):
stratified 3-fold CV, repeated over ``--fold-seeds``, on the calibrated (cross-fitted, where the run
has them) **train** concepts of a ``train-detector`` run; val and test are not read. Each candidate
is the chosen settings with one change; for each: accuracy (std over the folds), ECE (15 bins),
AURC with the head's own confidence (largest BetP; 0-100 scale), CPU seconds per fit (one thread),
rules, and the share of inputs whose prediction at most 10 sufficient rules decide
(`ferl.evidence.sufficiency.sufficient_rule_counts`; learned weights only).

    python scripts/study_concept_settings.py runs/cub50_lite0 [--fold-seeds 0 1 2] [--variant medium]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from sklearn.model_selection import StratifiedKFold  # noqa: E402

from cbm.concepts.calibration import ConceptCalibrator  # noqa: E402
from cbm.data.concept_tables import load_concept_table  # noqa: E402
from cbm.heads.models import CONCEPT_SETTINGS  # noqa: E402
from ferl import FERLClassifier  # noqa: E402
from ferl import metrics as M  # noqa: E402
from ferl.evidence.sufficiency import sufficient_rule_counts  # noqa: E402

#: Each variant's candidates: what each changes in the chosen settings.
CANDIDATES: dict[str, dict[str, dict]] = {
    "deep": {
        "chosen": {},
        "25 bootstrap cuts (the preset's)": {"n_bootstrap": 25},
        "4 rules per class (the preset's)": {"rules_per_class": 4.0},
        "1 rule per class, no floor (50 rules on 50 classes)": {"max_rules": 50},
        "2 rules per class, no floor (100 rules on 50 classes)": {"max_rules": 100},
    },
    **{variant: {"chosen": {}, "the paper's tree evidence (the preset's)": {"evidence_weights": "tree"}}
       for variant in ("medium", "compact")},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a run directory with concepts/ and calibration.json")
    parser.add_argument("--fold-seeds", type=int, nargs="+", default=[0, 1, 2],
                        help="one 3-fold split of the train concepts per seed (default: 0 1 2)")
    parser.add_argument("--variant", choices=sorted(CANDIDATES), default="deep")
    args = parser.parse_args()
    folder = args.run / "concepts"
    if not folder.is_dir() or not (args.run / "calibration.json").is_file():
        parser.error(f"{args.run} is not a run: train-detector writes concepts/ and calibration.json there")
    name = "train_crossfit" if (folder / "train_crossfit.npz").is_file() else "train"
    table = load_concept_table(folder / f"{name}.npz")
    X = ConceptCalibrator.load(args.run / "calibration.json").transform(table.probs.astype(np.float64),
                                                                         table.concept_names)
    y = table.y
    splits = [s for seed in args.fold_seeds
              for s in StratifiedKFold(3, shuffle=True, random_state=seed).split(X, y)]
    chosen = CONCEPT_SETTINGS[args.variant]
    print(f"# {args.run} ({name}, {X.shape[0]} rows, {len(np.unique(y))} classes): FERL-{args.variant}, "
          f"{len(splits)} folds; chosen = {chosen}\n")
    print("| candidate | accuracy (fold std) | ECE | AURC | fit s | rules | decided by <= 10 rules |")
    print("|---|---|---|---|---|---|---|")
    for label, change in CANDIDATES[args.variant].items():
        rows = []
        for fit, held in splits:
            start = time.process_time()
            model = FERLClassifier(args.variant, random_state=0, **{**chosen, **change})
            model.fit(X[fit], y[fit])
            seconds = time.process_time() - start
            proba = model.predict_proba(X[held])
            truth = np.searchsorted(model.classes_, y[held])
            pred = proba.argmax(axis=1)
            rows.append((M.accuracy(truth, pred), M.expected_calibration_error(truth, proba),
                         M.aurc(truth, pred, proba.max(axis=1)), seconds, model.n_rules_,
                         np.mean(sufficient_rule_counts(model, X[held]) <= 10)
                         if model.evidence_weights == "learned" else np.nan))
        acc, ece, aurc, seconds, rules, short = np.array(rows).T
        print(f"| {label} | {100 * acc.mean():.1f} ({100 * acc.std():.1f}) | {100 * ece.mean():.1f} | "
              f"{aurc.mean():.2f} | {seconds.mean():.2f} | {rules.mean():.0f} | "
              f"{'–' if np.isnan(short).any() else f'{100 * short.mean():.1f} %'} |",
              flush=True)


if __name__ == "__main__":
    main()
