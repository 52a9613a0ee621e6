"""FERL's novelty on the open world's fold concept tables (paper §5.2 protocol), without retraining.

Usage::

    python scripts/bench_openworld_novelty.py ROOT [--heldout-part novel] [--quantiles 0.95,0.995]
                                              [--slope 0.05]

``ROOT`` is an ``evaluate-openworld`` output folder (``folds.json`` and ``seed<s>/fold<f>/concepts/
{train,val,test,novel}.npz``, e.g. from ``configs/openworld/synthetic.yaml``). For every fold found:
the per-concept calibrator is fitted on the retained **val** table (`cbm.concepts`), FERL-deep
(``random_state`` = the seed) and the dedicated detectors on the retained **train** vectors (the
detector's cross-fitted ones where the run has them, as ``evaluate-openworld`` picks), and the
retained **test** images (in-distribution) are compared with the held-out classes' images (OOD):

* AUROC and rejection at 95 % val acceptance (`ferl.metrics.ood_summary`) of every FERL kind
  (`ferl.benchmarks.ood.FERL_OOD_KINDS`: the product's and the ablations',
  `ferl.benchmarks.ood_kinds`), of the ignorance with ``novelty_discount`` on
  (``ignorance-discounted``: the ``"typical"`` discount, `ferl.novelty.discount`; ``-rules``: the
  per-source one) and of the dedicated detectors;
* abstention rate (credal set = every class) of retained test and held-out images, discount off /
  on / per source (``rules``);
* attribute naming: precision@3 of the top-3 ``anomalous_features`` of each held-out image against
  the concepts where it differs from its nearest retained class profile (image-level ground truth,
  `cbm.openworld.metrics.image_anomaly_ground_truth`; synthetic world only).

``--quantiles`` and ``--slope`` override `ferl.novelty.discount`'s ``DISCOUNT_QUANTILES`` and
``DISCOUNT_SLOPE`` (a study of the discount). Prints
one row per fold and the mean and standard deviation over folds.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from cbm.concepts import ConceptCalibrator
from cbm.data.concept_tables import load_concept_tables
from cbm.detector.crossfit import CROSSFIT_SPLIT
from cbm.heads.train_concepts import resolve_train_concepts
from cbm.openworld.metrics import image_anomaly_ground_truth, precision_at_k
from ferl import FERLClassifier
from ferl import metrics as M
from ferl.benchmarks.ood import DETECTORS, DISCOUNTED, FERL_OOD_KINDS, ferl_score
from ferl.benchmarks.ood_kinds import ablation_score
from ferl.novelty import discount as evidence_discount


def _class_profiles(root: Path) -> np.ndarray | None:
    """Class concept profiles of the synthetic world (None for another data set), rebuilt from
    the first fold's detector config (``data.dataset_kwargs``)."""
    import yaml

    from cbm.data.synthetic_world import make_world

    config = yaml.safe_load(next(iter(sorted(root.glob("seed*/fold*/config.yaml")))).read_text())
    if config["data"]["dataset"] != "synthetic":
        return None
    kwargs = dict(config["data"].get("dataset_kwargs") or {})
    world = {k: kwargs[k] for k in ("n_classes", "n_heldout", "seed", "p_variation", "min_distance")
             if k in kwargs}
    return make_world(**world).class_concepts


def evaluate(fold_dir: Path, seed: int, retained: list[int], profiles, heldout_part: str) -> dict:
    """Every number of the module docstring for one fold."""
    crossfit = (fold_dir / "concepts" / f"{CROSSFIT_SPLIT}.npz").is_file()
    splits = ("train", "val", "test", heldout_part) + ((CROSSFIT_SPLIT,) if crossfit else ())
    tables = load_concept_tables(fold_dir, splits=splits)
    names = tables["train"].concept_names
    cal = ConceptCalibrator().fit(tables["val"].probs, tables["val"].concept_labels, names)
    X = {p: cal.transform(t.probs, names) for p, t in tables.items()}
    if resolve_train_concepts("auto", crossfit) == "cross-fitted":  # as evaluate-openworld does
        X["train"] = X.pop(CROSSFIT_SPLIT)
    parts = ("val", "test", heldout_part)
    clf = FERLClassifier("deep", random_state=seed).fit(X["train"], tables["train"].y)
    scores = {k: {p: ferl_score(clf, X[p], k) for p in parts} for k in FERL_OOD_KINDS}
    for b in DETECTORS:
        det = DETECTORS[b][1](seed).fit(X["train"], tables["train"].y)
        scores[b] = {p: det.score(X[p]) for p in parts}
    row = {}
    for tag, on in (("off", False), ("on", True), ("rules", "rules")):
        clf.set_params(novelty_discount=on)
        sets = {p: clf.predict_set(X[p]) for p in ("test", heldout_part)}
        row[f"abstain_test_{tag}"] = 100 * sets["test"].all(axis=1).mean()
        row[f"abstain_novel_{tag}"] = 100 * sets[heldout_part].all(axis=1).mean()
        row[f"accuracy_{tag}"] = 100 * np.mean(clf.predict(X["test"]) == tables["test"].y)
        if on is True:
            scores[DISCOUNTED] = {p: ablation_score(clf, X[p], "ignorance") for p in parts}
        elif on:
            scores[f"{DISCOUNTED}-rules"] = {p: ablation_score(clf, X[p], "ignorance") for p in parts}
    clf.set_params(novelty_discount=False)
    for name, s in scores.items():
        summary = M.ood_summary(s["val"], s["test"], s[heldout_part])
        row[f"auroc_{name}"] = 100 * summary["auroc"]
        row[f"reject_{name}"] = 100 * summary["reject"]
    if profiles is not None:
        truth = image_anomaly_ground_truth(tables[heldout_part].concept_labels, profiles, retained)
        ranked = np.array([[a.feature for a in r] for r in clf.anomalous_features(X[heldout_part], 3)])
        row["image_p@3"] = 100 * float(precision_at_k(ranked, truth, 3).mean())
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--heldout-part", default="novel", help="table of the held-out classes' images")
    parser.add_argument("--quantiles", default=None,
                        help="the discount's quantiles q0,q1 (default: ferl.novelty.discount's)")
    parser.add_argument("--slope", type=float, default=None,
                        help="the discount's slow fall delta (default: ferl.novelty.discount's)")
    args = parser.parse_args()
    if args.quantiles:  # read at fit (the scale) and at inference (the slope)
        evidence_discount.DISCOUNT_QUANTILES = tuple(float(q) for q in args.quantiles.split(","))
    if args.slope is not None:
        evidence_discount.DISCOUNT_SLOPE = args.slope
    folds = json.loads((args.root / "folds.json").read_text())
    profiles = _class_profiles(args.root)
    rows = {}
    for fold_dir in sorted(args.root.glob("seed*/fold*")):
        if not (fold_dir / "concepts" / f"{args.heldout_part}.npz").is_file():
            continue
        seed, index = int(fold_dir.parent.name[4:]), int(fold_dir.name[4:])
        retained = folds["folds"][index]["retained"]
        rows[f"{fold_dir.parent.name}/{fold_dir.name}"] = evaluate(fold_dir, seed, retained, profiles,
                                                                   args.heldout_part)
    if not rows:
        raise SystemExit(f"error: no fold with concept tables under {args.root}")
    cols = list(next(iter(rows.values())))
    print("| fold | " + " | ".join(cols) + " |\n|---|" + "---:|" * len(cols))
    for name, r in rows.items():
        print(f"| {name} | " + " | ".join(f"{r[c]:.1f}" for c in cols) + " |")
    for label, reduce in (("mean", np.mean), ("std", np.std)):
        print(f"| **{label}** | " + " | ".join(f"{reduce([r[c] for r in rows.values()]):.1f}" for c in cols)
              + " |")


if __name__ == "__main__":
    main()
