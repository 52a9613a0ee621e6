"""FERL novelty benchmark: planted near-OOD, geometric OOD (appendix C.2), leave-one-class-out and
the novelty discount of the evidence.

Usage::

    python scripts/bench_novelty.py [--data-root DIR] [--datasets wine,glass,...|multiclass|all]
                                    [--seeds 0,1,2] [--studies planted,geometric,loco,select,discount,id]

``--data-root`` defaults to ``$FERL_DATA_ROOT/tabular`` or ``../shared/data/tabular``. Every study fits
FERL-deep on a stratified 70/30 split, min-max scaled on the training part, and prints one row per
data set (means over seeds) and mean, std, min and max rows over data sets:

* **planted**: every *unsplit*, non-constant feature in turn is shifted by 4 training standard
  deviations on the test inputs; the fraction of test inputs whose top-ranked
  ``anomalous_features`` entry is that feature (mean over those features).
* **geometric**: the test inputs moved off the training support in three ways: ``all``, every
  feature by ``s (2 + u)`` ranges (``s`` a random sign, ``u ~ U(0, 1)``) as in the C.2 ablation of
  ``ferl.benchmarks``; ``near``, every feature set ``0.1 + 0.4 u`` ranges beyond a random end of its
  training range (the protocol of ``tests/ferl/test_novelty.py``); ``one``, one random feature per
  input set ``0.25 + u`` ranges beyond a random end. AUROC (OOD positive) of the firing score with
  the gates on and off, of the ignorance (on / off) and of the default ``typical`` score (on), the mean leaf
  firing of the OOD inputs (on), and the in-distribution accuracy change gates on - off (points).
* **loco**: leave-one-class-out on data sets with 3+ classes (at most 4 held-out classes per
  seed): AUROC of each kind of `ferl.benchmarks.ood.FERL_OOD_KINDS` (the product's ``typical`` and
  ``ignorance`` and the ablation kinds of `ferl.benchmarks.ood_kinds`) and of the discounted ignorance
  (``novelty_discount``).

The last three studies use the tabular benchmark's folds (``ferl.benchmarks.protocol``, seed 0; each
``--seeds`` value is a fold number) and measure on the fold's **calibration** part, never its test
part, so that they can choose defaults:

* **select**: leave-one-class-out (at most 4 held-out classes per fold, drawn with the fold number):
  AUROC of ``typical`` (the product's default), of its part ``leaf`` (``T / d + LEAF_RESIDUAL R +
  F``, an ablation kind now, as are the others), of ``nll`` (the same with
  ``R / 2``), of that sum with the other weights of ``R`` in `RESIDUAL_WEIGHTS` (``R*w``), of the
  leaf Gaussians' ``T`` alone, of ``residual``, of ``combined`` and of kNN (k = 5) on the same inputs.
* **discount**: the same held-out classes with ``novelty_discount`` off and on: AUROC of the
  ignorance and of ``typical``, abstention rates of retained and held-out inputs.
* **id**: every class retained, discount off and on: accuracy, set coverage, mean set size and
  abstention rate (0-100 except the set size).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import MinMaxScaler

from ferl import FERLClassifier
from ferl import metrics as M
from ferl.benchmarks.keel import default_data_root, list_datasets, load_keel
from ferl.benchmarks.ood import FERL_OOD_KINDS, KNNDetector, ferl_score
from ferl.benchmarks.ood_kinds import ablation_score
from ferl.benchmarks.protocol import make_splits, scale_fold
from ferl.metrics import ood_auroc

#: Other weights of the residual ``R`` in the ``leaf`` score that the select study compares.
RESIDUAL_WEIGHTS = (0.125, 0.0)
DEFAULT_SETS = ("wine", "newthyroid", "glass", "ecoli", "vehicle", "segment", "yeast", "vowel",
                "cleveland", "page-blocks", "pima", "banana")


def _split(X, y, seed):
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.3, random_state=seed, stratify=y)
    scaler = MinMaxScaler().fit(X_tr)
    return scaler.transform(X_tr), scaler.transform(X_te), y_tr, y_te


def push_all(X: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Every (min-max scaled) feature moved by ``s (2 + u)`` ranges."""
    return X + rng.choice([-1.0, 1.0], size=X.shape) * (2.0 + rng.random(X.shape))


def push_near(X: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Every feature set ``0.1 + 0.4 u`` ranges beyond a random end of the training range [0, 1]."""
    beyond = 0.1 + 0.4 * rng.random(X.shape)
    return np.where(rng.random(X.shape) < 0.5, -beyond, 1.0 + beyond)


def push_one(X: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One random feature per row set ``0.25 + u`` ranges beyond the training range [0, 1]."""
    out = X.copy()
    rows = np.arange(X.shape[0])
    cols = rng.integers(0, X.shape[1], X.shape[0])
    beyond = 0.25 + rng.random(X.shape[0])
    up = rng.random(X.shape[0]) < 0.5
    out[rows, cols] = np.where(up, 1.0 + beyond, -beyond)
    return out


def planted(X, y, seed):
    X_tr, X_te, y_tr, _ = _split(X, y, seed)
    clf = FERLClassifier("deep", random_state=seed).fit(X_tr, y_tr)
    used = set(clf.tree_.feature[clf.tree_.feature >= 0].tolist())
    sd = X_tr.std(axis=0)
    rates = []
    for f in range(X.shape[1]):
        if f in used or sd[f] == 0:
            continue
        shifted = X_te.copy()
        shifted[:, f] += 4.0 * sd[f]
        top = [row[0].feature for row in clf.anomalous_features(shifted, top_k=1)]
        rates.append(np.mean(np.asarray(top) == f))
    return {"planted_rank1": float(np.mean(rates)) if rates else np.nan, "n_unsplit": len(rates)}


def geometric(X, y, seed):
    X_tr, X_te, y_tr, y_te = _split(X, y, seed)
    clf = FERLClassifier("deep", random_state=seed).fit(X_tr, y_tr)
    rng = np.random.default_rng(seed)
    row = {}
    acc = {}
    for name, push in (("all", push_all), ("near", push_near), ("one", push_one)):
        X_ood = push(X_te, rng)
        row[f"{name}_ood_firing"] = float(np.mean(1.0 - ablation_score(clf, X_ood, "firing")))
        for gates in (True, False):
            clf.set_params(bounded_support=gates)
            tag = "on" if gates else "off"
            row[f"{name}_firing_{tag}"] = ood_auroc(ablation_score(clf, X_te, "firing"),
                                                    ablation_score(clf, X_ood, "firing"))
            row[f"{name}_ignorance_{tag}"] = ood_auroc(ablation_score(clf, X_te, "ignorance"),
                                                       ablation_score(clf, X_ood, "ignorance"))
            acc[tag] = float(np.mean(clf.predict(X_te) == y_te))
        clf.set_params(bounded_support=True)
        row[f"{name}_typical_on"] = ood_auroc(clf.ood_score(X_te), clf.ood_score(X_ood))
    row["acc_change_pts"] = 100.0 * (acc["on"] - acc["off"])
    return row


def loco(X, y, seed, max_classes=4):
    classes = np.unique(y)
    if len(classes) < 3:
        return {}
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.3, random_state=seed, stratify=y)
    held_out = np.random.default_rng(seed).choice(classes, size=min(max_classes, len(classes)),
                                                  replace=False)
    scores = {kind: [] for kind in (*FERL_OOD_KINDS, "discounted")}
    for held in held_out:
        keep = y_tr != held
        scaler = MinMaxScaler().fit(X_tr[keep])
        clf = FERLClassifier("deep", random_state=seed).fit(scaler.transform(X_tr[keep]), y_tr[keep])
        X_id, X_ood = scaler.transform(X_te[y_te != held]), scaler.transform(X_te[y_te == held])
        for kind in FERL_OOD_KINDS:
            scores[kind].append(ood_auroc(ferl_score(clf, X_id, kind), ferl_score(clf, X_ood, kind)))
        clf.set_params(novelty_discount=True)
        scores["discounted"].append(ood_auroc(ablation_score(clf, X_id, "ignorance"),
                                              ablation_score(clf, X_ood, "ignorance")))
    return {f"loco_{k}": float(np.mean(v)) for k, v in scores.items()}


def _cal_holdouts(X, y, fold, max_classes=4):
    """The benchmark's fold ``fold`` (seed 0) and the classes held out in turn on it."""
    y = np.unique(y, return_inverse=True)[1]
    data = scale_fold(X, y, make_splits(y, 5, 0)[fold], int(y.max()) + 1)
    n_classes = data.n_classes
    held = np.random.default_rng(fold).choice(n_classes, min(max_classes, n_classes), replace=False)
    return data, sorted(held.tolist()) if n_classes >= 3 else []


def _retained(data, held):
    """Retained-class fit part, and retained / held-out calibration inputs (None if one is empty)."""
    keep = data.y_fit != held
    X_id, X_ood = data.X_cal[data.y_cal != held], data.X_cal[data.y_cal == held]
    if not len(X_id) or not len(X_ood):
        return None
    return data.X_fit[keep], data.y_fit[keep], X_id, X_ood


def _per_held_class(X, y, fold, prefix, score):
    """Mean over the held-out classes of the rows ``score(clf, X_id, X_ood)`` gives, where ``clf``
    is FERL-deep fitted on the retained classes; keys prefixed with ``prefix``."""
    data, held_out = _cal_holdouts(X, y, fold)
    rows = []
    for held in held_out:
        part = _retained(data, held)
        if part is None:
            continue
        X_fit, y_fit, X_id, X_ood = part
        clf = FERLClassifier("deep", random_state=0).fit(X_fit, y_fit)
        rows.append(score(clf, X_fit, X_id, X_ood))
    return {f"{prefix}_{k}": float(np.mean([r[k] for r in rows])) for k in rows[0]} if rows else {}


def _select_row(clf, X_fit, X_id, X_ood):
    kinds = ("typical", "leaf", "prototype", "nll", "combined", "residual")
    scores = {k: [ferl_score(clf, Z, k) for Z in (X_id, X_ood)] for k in kinds}
    row = {k: ood_auroc(*s) for k, s in scores.items()}
    for w in RESIDUAL_WEIGHTS:  # T / d + w R + F: "nll" less (1/2 - w) R
        (n_id, n_ood), (r_id, r_ood) = scores["nll"], scores["residual"]
        row[f"R*{w:g}"] = ood_auroc(n_id - (0.5 - w) * r_id, n_ood - (0.5 - w) * r_ood)
    leaf = [((n := clf._novelty(Z)).deviation + n.spread).sum(axis=1) for Z in (X_id, X_ood)]
    row["T"] = ood_auroc(*leaf)
    knn = KNNDetector(5).fit(X_fit)
    row["knn"] = ood_auroc(knn.score(X_id), knn.score(X_ood))
    return row


def _discount_row(clf, X_fit, X_id, X_ood):
    row = {"typical": ood_auroc(clf.ood_score(X_id), clf.ood_score(X_ood))}
    for tag, on in (("off", False), ("on", True)):
        clf.set_params(novelty_discount=on)
        ev_id, ev_ood = clf.evidence(X_id), clf.evidence(X_ood)
        row[f"ignorance_{tag}"] = ood_auroc(ev_id.ignorance, ev_ood.ignorance)
        row[f"abstain_id_{tag}"] = 100 * ev_id.abstain.mean()
        row[f"abstain_ood_{tag}"] = 100 * ev_ood.abstain.mean()
    return row


def select(X, y, fold):
    return _per_held_class(X, y, fold, "select", _select_row)


def discount(X, y, fold):
    return _per_held_class(X, y, fold, "discount", _discount_row)


def indist(X, y, fold):
    data, _ = _cal_holdouts(X, y, fold)
    clf = FERLClassifier("deep", random_state=0).fit(data.X_fit, data.y_fit)
    y_cal = np.searchsorted(clf.classes_, data.y_cal)
    row = {}
    for tag, on in (("off", False), ("on", True)):
        clf.set_params(novelty_discount=on)
        ev = clf.evidence(data.X_cal)
        row[f"id_accuracy_{tag}"] = 100 * M.accuracy(y_cal, ev.pignistic.argmax(axis=1))
        row[f"id_coverage_{tag}"] = 100 * M.coverage(y_cal, ev.credal_set)
        row[f"id_set_size_{tag}"] = M.mean_set_size(ev.credal_set)
        row[f"id_abstain_{tag}"] = 100 * ev.abstain.mean()
    return row


def _print_table(title, rows):
    cols = sorted({k for r in rows.values() for k in r})
    print(f"\n## {title}\n")
    print("| dataset | " + " | ".join(cols) + " |")
    print("|---|" + "---:|" * len(cols))
    for name, r in rows.items():
        print(f"| {name} | " + " | ".join(_fmt(r.get(c, np.nan)) for c in cols) + " |")
    for label, reduce in (("mean", np.mean), ("std", lambda v: np.std(v, ddof=1)), ("min", np.min),
                          ("max", np.max)):
        stats = {c: _reduce(reduce, [r.get(c, np.nan) for r in rows.values()]) for c in cols}
        print(f"| **{label}** | " + " | ".join(_fmt(stats[c]) for c in cols) + " |")


def _reduce(reduce, values) -> float:
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]
    return float(reduce(values)) if values.size else float("nan")


def _nanmean(values) -> float:
    return _reduce(np.mean, values)


def _fmt(v):
    return "-" if v is None or not np.isfinite(v) else f"{v:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", default=default_data_root(),
                        help="folder of KEEL .dat files "
                             "(default: $FERL_DATA_ROOT/tabular or ../shared/data/tabular)")
    parser.add_argument("--datasets", default=",".join(DEFAULT_SETS),
                        help="comma-separated names, 'multiclass' (3+ classes) or 'all'")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--studies", default="planted,geometric,loco")
    args = parser.parse_args()
    if args.data_root is None:
        raise FileNotFoundError("no data folder: pass --data-root or set FERL_DATA_ROOT")
    root = Path(args.data_root)
    if not root.is_dir():
        raise FileNotFoundError(f"data folder {root} not found; pass --data-root or set FERL_DATA_ROOT")
    seeds = [int(s) for s in args.seeds.split(",")]
    studies = {"planted": planted, "geometric": geometric, "loco": loco, "select": select,
               "discount": discount, "id": indist}
    names = args.datasets.split(",")
    if args.datasets in ("all", "multiclass"):
        names = [n for n in list_datasets(root)
                 if args.datasets == "all" or len(np.unique(load_keel(root / f"{n}.dat").y)) >= 3]
    for study in args.studies.split(","):
        rows = {}
        for name in names:
            ds = load_keel(root / f"{name}.dat")  # FileNotFoundError names a missing file
            per_seed = [studies[study](ds.X, ds.y, seed) for seed in seeds]
            keys = sorted({k for r in per_seed for k in r})
            rows[name] = {k: _nanmean([r.get(k, np.nan) for r in per_seed]) for k in keys}
        _print_table(study, {k: v for k, v in rows.items() if v})


if __name__ == "__main__":
    main()
