"""FERL heads beside the baselines a user would pick, on a run's real concept vectors
(docs/results/real-heads.md).

Reads a run made by ``train-detector`` and ``fit-head`` (``concepts/{train_crossfit or train,val,
test}.npz`` and ``calibration.json``) and fits, on the calibrated train concepts, for each head seed:
FERL-deep with fit-head's concept settings (learned weights of evidence,
`cbm.heads.models.CONCEPT_SETTINGS`), FERL-deep with the paper's tree evidence (the same settings
without the learned weights), logistic regression, a random forest (300 trees) and kNN (10).
Every head is scored on test with its own confidence (the largest class probability; FERL: BetP):

* accuracy, ECE (15 bins), AURC;
* sets at 90 % and 95 % target coverage, calibrated on the val rows calibrated out of sample
  (`cbm.concepts.calibration.crossfit_calibrate`): FERL's coverage-targeted credal set
  (`ferl.FERLClassifier.predict_set`), and every head's split-conformal LAC set; coverage,
  mean size, abstention (every class in the set);
* FERL's interval-dominance set (paper eq. 4): coverage, size, abstention, and the accuracy on the
  inputs it does not abstain on beside the head's own accuracy on as many of its most confident;
* FERL: leaves fired per image, and the sufficient rules that `explain` lists (the fewest whose
  weights of evidence alone, with the prior, reach 90 % of the margin of the prediction over the
  runner-up: `ferl.evidence.sufficiency.sufficient_rule_counts`), median / 90th percentile / share of images
  with at most 10; beside it the same for the rules that carry 90 % of the positive parts' total
  (`rule_counts`' first output, an alternative reading).

    python scripts/bench_real_heads.py runs/cub50_lite0 [--seeds 0 1 2]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.neighbors import KNeighborsClassifier

from cbm.concepts.calibration import ConceptCalibrator, crossfit_calibrate
from cbm.data.concept_tables import load_concept_table
from cbm.heads.models import CONCEPT_SETTINGS
from ferl import FERLClassifier
from ferl import metrics as M
from ferl.evidence.conformal import SplitConformal
from ferl.evidence.sufficiency import sufficient_rule_counts
from ferl.evidence.weights import rule_sources

COVERAGES = (0.9, 0.95)


def heads(seed: int) -> dict:
    """The heads compared, by label."""
    learned = CONCEPT_SETTINGS["deep"]
    tree = {k: v for k, v in learned.items() if k != "evidence_weights"}
    return {
        "FERL-deep (learned)": FERLClassifier("deep", random_state=seed, **learned),
        "FERL-deep (tree evidence)": FERLClassifier("deep", random_state=seed, **tree),
        "LR": LogisticRegression(max_iter=3000),
        "RF (300)": RandomForestClassifier(300, random_state=seed, n_jobs=1),
        "kNN (10)": KNeighborsClassifier(10),
    }


def set_metrics(y: np.ndarray, sets: np.ndarray) -> tuple[float, float, float]:
    """Coverage, mean size and abstention (every class in the set) of ``sets``."""
    return M.coverage(y, sets), M.mean_set_size(sets), float(sets.all(axis=1).mean())


def rule_counts(model: FERLClassifier, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """How many rules explain an input's prediction over the runner-up, two readings: the
    rules that carry 90 % of the positive parts' total of the margin ``log Pl(top) - log
    Pl(runner-up)`` (an alternative reading), and the sufficient rules that `explain` lists (the
    fewest whose parts alone, with the prior, reach 90 % of the margin:
    `ferl.evidence.sufficiency.sufficient_rule_counts`)."""
    fired = model.tree_.sparse_firing(X, bool(model.bounded_support), model._gate_margin())
    strengths = rule_sources(X, model.feature_range_, fired.dense(fired.phi, model.tree_.is_leaf))
    top2 = np.argsort(-model.predict_proba(X), axis=1)[:, :2]
    coef = model.evidence_weights_.coef
    parts = np.maximum((coef[top2[:, 0]] - coef[top2[:, 1]]) * strengths, 0.0)
    ranked = np.cumsum(-np.sort(-parts, axis=1), axis=1)
    positive = 1 + np.argmax(ranked >= 0.9 * ranked[:, -1:] * (1 - 1e-12), axis=1)
    return np.where(ranked[:, -1] > 0, positive, 0), sufficient_rule_counts(model, X)


def score(name: str, model, X_val, y_val, X_test, y_test) -> dict:
    """Every metric of one fitted head (see the module docstring)."""
    proba = model.predict_proba(X_test)
    pred = proba.argmax(axis=1)
    confidence = proba.max(axis=1)
    row = {"accuracy": M.accuracy(y_test, pred), "ece": M.expected_calibration_error(y_test, proba),
           "aurc": M.aurc(y_test, pred, confidence)}
    for coverage in COVERAGES:
        cp = SplitConformal(alpha=1 - coverage, score="lac").fit(model.predict_proba(X_val), y_val)
        sets = cp.predict_set(proba)
        row[f"lac{coverage}"] = set_metrics(y_test, sets)
    if isinstance(model, FERLClassifier):
        model.calibrate_sets(X_val, y_val)
        for coverage in COVERAGES:
            sets = model.predict_set(X_test, coverage=coverage)
            row[f"ferl{coverage}"] = set_metrics(y_test, sets)
        paper = model.predict_set(X_test)
        accepted = ~paper.all(axis=1)
        share = accepted.mean()
        top = np.argsort(-confidence, kind="stable")[: max(1, int(round(share * len(y_test))))]
        row["interval_dominance"] = (M.coverage(y_test, paper), M.mean_set_size(paper), 1 - share)
        row["accepted"] = (share, M.accuracy(y_test[accepted], pred[accepted]) if accepted.any() else np.nan,
                           M.accuracy(y_test[top], pred[top]))
        leaf_phi = model.node_firing(X_test)[:, model.tree_.is_leaf]
        row["leaves_fired"] = float((leaf_phi > 0).sum(axis=1).mean())
        if model.evidence_weights_ is not None:
            for key, counts in zip(("positive", "sufficient"), rule_counts(model, X_test), strict=True):
                row[key] = (np.median(counts), np.percentile(counts, 90), np.mean(counts <= 10))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a run directory with concepts/ and calibration.json")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    args = parser.parse_args()
    folder = args.run / "concepts"
    train_name = "train_crossfit" if (folder / "train_crossfit.npz").is_file() else "train"
    tables = {s: load_concept_table(folder / f"{s}.npz") for s in (train_name, "val", "test")}
    names = tables["val"].concept_names
    cal = ConceptCalibrator.load(args.run / "calibration.json")
    X_train = cal.transform(tables[train_name].probs.astype(np.float64), names)
    X_test = cal.transform(tables["test"].probs.astype(np.float64), names)
    val = tables["val"]
    results: dict[str, list[dict]] = {}
    for seed in args.seeds:
        X_val = crossfit_calibrate(val.probs.astype(np.float64), val.concept_labels, names, seed=seed)
        for name, model in heads(seed).items():
            model.fit(X_train, tables[train_name].y)
            results.setdefault(name, []).append(score(name, model, X_val, val.y, X_test, tables["test"].y))
            print(f"seed {seed}: {name} done", flush=True)
    print(f"\n# {args.run}: {X_train.shape[0]} train ({train_name}), {len(val.y)} val, "
          f"{X_test.shape[0]} test, {X_train.shape[1]} concepts; mean (std) over seeds {args.seeds}; "
          "%, AURC on 0-100\n")

    def cell(rows, key, i=None, pct=True):
        values = np.array([r[key] if i is None else r[key][i] for r in rows], dtype=float)
        scale = 100 if pct else 1
        return f"{scale * values.mean():.2f} ({scale * values.std():.2f})"

    columns = [f"{k} {c:g}: coverage / size / abstention" for c in COVERAGES for k in ("FERL set", "LAC set")]
    print("| head | accuracy | ECE | AURC | " + " | ".join(columns) + " |")
    print("|---" * (4 + 2 * len(COVERAGES)) + "|")
    for name, rows in results.items():
        sets = []
        for c in COVERAGES:
            for key in (f"ferl{c}", f"lac{c}"):
                sets.append(" / ".join((cell(rows, key, 0), cell(rows, key, 1, False), cell(rows, key, 2)))
                            if key in rows[0] else "–")
        print(f"| {name} | {cell(rows, 'accuracy')} | {cell(rows, 'ece')} | "
              f"{cell(rows, 'aurc', pct=False)} | " + " | ".join(sets) + " |")
    print("\n| FERL head | interval dominance: coverage / size / abstention | share accepted | accuracy "
          "accepted | own confidence at that share | leaves fired | sufficient rules (what explain lists): "
          "median / p90 / share <= 10 | rules carrying 90 % of the positive parts: median / p90 / "
          "share <= 10 |")
    print("|---|---|---|---|---|---|---|---|")
    for name, rows in results.items():
        if "interval_dominance" not in rows[0]:
            continue
        sufficient, positive = (
            " / ".join((cell(rows, k, 0, False), cell(rows, k, 1, False), cell(rows, k, 2))) if k in rows[0]
            else "–" for k in ("sufficient", "positive"))
        key = "interval_dominance"
        dominance = " / ".join((cell(rows, key, 0), cell(rows, key, 1, False), cell(rows, key, 2)))
        print(f"| {name} | {dominance} | {cell(rows, 'accepted', 0)} | {cell(rows, 'accepted', 1)} | "
              f"{cell(rows, 'accepted', 2)} | {cell(rows, 'leaves_fired', pct=False)} | {sufficient} | "
              f"{positive} |")


if __name__ == "__main__":
    main()
