"""Why answering concepts lowers some heads' accuracy, and what fitting on answered rows changes.

On a run's test split, for each head: the accuracy after k answered concept groups (the expert's
answers are the true concept labels, entering the head as `evaluate-interventions`' ``auto``
expert values) under the ``random`` and ``uncertainty`` policies, for three fits of the same head
on the train split:

* ``sequential``: on the detector's (calibrated) train concepts alone (FERL heads with
  ``--ferl-settings``: fit-head's ``concepts``, or the paper's tree evidence, ``learner``);
* ``sequential + answered``: on those rows plus a copy of them in which each row has a random
  share of its concept groups answered with the true labels (`cbm.heads.interventions.training_rows`,
  what fit-head fits its CART heads on; randomised interventions as in Espinosa Zarlenga et al.
  2023, here on a fixed detector);
* ``independent``: on the true train concepts (Koh et al. 2020).

Each line gives the accuracy at k = 0 .. G and the largest drop below k = 0 (points). The train
and test splits are the run's; val is not read.

    python scripts/study_interventions.py runs/demo --heads cart,ferl-medium,ferl-compact,ferl-deep,lr \
        [--ferl-settings learner]
"""

from __future__ import annotations

import argparse

import numpy as np

from cbm.heads.interventions import expert_values_for, training_rows
from cbm.heads.registry import make_head
from cbm.interventions.curves import intervention_curve
from cbm.interventions.run import load_concepts


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dir")
    p.add_argument("--heads", default="cart,ferl-medium,ferl-compact,ferl-deep,lr")
    p.add_argument("--policies", default="random,uncertainty")
    p.add_argument("--ferl-settings", choices=("concepts", "learner"), default="concepts")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    run = load_concepts(args.run_dir)
    train, test = run.tables["train"], run.tables["test"]
    names = run.class_names
    X_train, X_test = run.concepts("train"), run.concepts("test")
    labels_train = train.concept_labels.astype(np.float64)
    labels_test = test.concept_labels.astype(np.float64)
    y_train = names[train.y]
    ks = list(range(run.groups.n_groups + 1))
    print(f"run {args.run_dir}: {len(y_train)} train, {len(test.y)} test rows, {run.groups.n_groups} groups")
    print("| head | fit | policy | " + " | ".join(f"k={k}" for k in ks) + " | largest drop (pts) |")
    print("|---|---|---|" + "---|" * (len(ks) + 1))
    for name in args.heads.split(","):
        options = {"settings": args.ferl_settings} if name.startswith("ferl") else {}
        answered = make_head(name, seed=args.seed, **options)
        answered.answered_fit = True  # this head, whatever its kind, on the rows of the answered copy too
        fits = {"sequential": (X_train, y_train),
                "sequential + answered": training_rows(answered, X_train, y_train, train, args.seed),
                "independent": (labels_train, y_train)}
        for fit, (X_fit, y_fit) in fits.items():
            head = make_head(name, seed=args.seed, **options).fit(X_fit, y_fit, train.concept_names)
            values = expert_values_for(head, X_fit)
            y_idx = np.searchsorted(head.classes_, names[test.y])
            for policy in args.policies.split(","):
                curve = intervention_curve(head, X_test, labels_test, run.groups, values, policy, ks,
                                           seed=args.seed, y_idx=y_idx)
                acc = np.array([pt["accuracy"] for pt in curve.points])
                print(f"| {name} | {fit} | {policy} | " + " | ".join(f"{100 * a:.1f}" for a in acc)
                      + f" | {100 * max(acc[0] - acc.min(), 0.0):.1f} |", flush=True)


if __name__ == "__main__":
    main()
