"""Accuracy against the rule budget on a CUB-shaped concept set (issue 15 item 3).

The set: ``--classes`` random binary class signatures over ``--concepts`` concepts, ``--n`` samples
(classes equally represented), each concept flipped with probability ``--flip``, Gaussian noise
``--noise`` added, values clipped to [0, 1]; the even-numbered samples of each class train, the odd
ones test. Prints, for each FERL variant, test accuracy and fit CPU time at each rule budget
(``max_rules``, exact) and at the preset's own budget, beside CART (unlimited) and logistic
regression, so that one can see where the budget stops binding.

Examples
--------
    python scripts/bench_budget.py                          # CUB-shaped: 6,000 x 112, 200 classes
    python scripts/bench_budget.py --classes 50 --n 1500 --budgets 50 100 200
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.tree import DecisionTreeClassifier  # noqa: E402

from ferl import FERLClassifier  # noqa: E402


def concept_set(n: int, concepts: int, classes: int, flip: float, noise: float, seed: int):
    """The CUB-shaped set: ``(X_train, y_train, X_test, y_test)``, X float64 in [0, 1]."""
    rng = np.random.default_rng(seed)
    signatures = rng.random((classes, concepts)) < 0.5
    y = np.arange(n) % classes
    X = signatures[y].astype(np.float64)
    flips = rng.random(X.shape) < flip
    X[flips] = 1.0 - X[flips]
    X = np.clip(X + rng.normal(0.0, noise, X.shape), 0.0, 1.0)
    train = (np.arange(n) // classes) % 2 == 0
    return X[train], y[train], X[~train], y[~train]


def _timed_fit(model, X, y):
    start = time.process_time()
    model.fit(X, y)
    return model, time.process_time() - start


def main(argv: list[str] | None = None) -> None:
    """Print the accuracy-vs-budget table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=6000)
    parser.add_argument("--concepts", type=int, default=112)
    parser.add_argument("--classes", type=int, default=200)
    parser.add_argument("--flip", type=float, default=0.05)
    parser.add_argument("--noise", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--variants", nargs="+", default=["deep", "medium"])
    parser.add_argument("--budgets", nargs="+", type=int, default=[50, 100, 200, 400, 800])
    args = parser.parse_args(argv)
    Xtr, ytr, Xte, yte = concept_set(args.n, args.concepts, args.classes, args.flip, args.noise,
                                     args.seed)
    # Warm-up: compile the numba kernels outside the timings.
    FERLClassifier(max_rules=4, random_state=0).fit(Xtr[:200], ytr[:200] % 2)
    print(f"{len(ytr)} training / {len(yte)} test samples, {args.concepts} concepts, "
          f"{args.classes} classes (CPU seconds, one thread)")
    print("| model | budget | rules | fit s | test accuracy |\n|---|---|---|---|---|")
    cart, t = _timed_fit(DecisionTreeClassifier(random_state=args.seed), Xtr, ytr)
    print(f"| CART | - | {cart.get_n_leaves()} | {t:.2f} | {np.mean(cart.predict(Xte) == yte):.3f} |")
    lr, t = _timed_fit(LogisticRegression(max_iter=2000), Xtr, ytr)
    print(f"| LR | - | - | {t:.2f} | {np.mean(lr.predict(Xte) == yte):.3f} |")
    for variant in args.variants:
        for budget in [None, *args.budgets]:
            model, t = _timed_fit(
                FERLClassifier(variant, max_rules=budget, random_state=args.seed), Xtr, ytr)
            label = "preset" if budget is None else str(budget)
            print(f"| FERL-{variant} | {label} | {model.n_rules_} | {t:.2f} | "
                  f"{np.mean(model.predict(Xte) == yte):.3f} |", flush=True)


if __name__ == "__main__":
    main()
