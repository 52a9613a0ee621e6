"""Variants of FERL's ``"typical"`` OOD score (`ferl.novelty.prototypes`), by AUROC in %.

**Units and residual** (always): ``"typical"`` as shipped (the ``"leaf"`` term ``T / d + F``
without the paper's residual, `ferl.novelty.ood_score.LEAF_RESIDUAL` = 0; the prototype distance in training
ranges, `ferl.novelty.prototypes.feature_ranges`) against the same with the prototype distance in training
standard deviations (**D in sd**), with a quarter of the residual in the leaf term (**R/4**), and
both (the version before).

**Exemplars** (``--exemplars``): would a local-density term beat it? An *exemplar distance*
``E(x)`` is the mean distance from an input to its ``k`` nearest training inputs, either among all
of them (**g**lobal, a kNN) or among those whose strongest ungated leaf firing is the input's
strongest leaf (**r**ule: "the nearest training examples of the rule this input reaches"), in
standardised units (**std**, `ferl.novelty.linalg.standardise`) or the raw inputs (**raw**), L1 (**ma**)
or L2 (**eu**). For each: ``E`` alone, ``t_leaf + t_E`` and ``"typical" + t_E`` (Fisher's method as
in `ferl.novelty.prototypes`: ``t_E`` is `ferl.novelty.ood_score.tail_nats` of ``E`` among the leave-self-out
distances of the reference training rows).

Beside them: the ``"leaf"`` and ``"prototype"`` kinds alone (ablation kinds,
`ferl.benchmarks.ood_kinds`) and the 5-NN detector of
`ferl.benchmarks.ood` (Euclidean, raw inputs, the k-th distance). AUROC: held-out classes against
retained-class inputs (`ferl.metrics.ood`).

Data: ``--runs`` folders of ``evaluate-openworld`` (concept tables per fold, read as
``scripts/bench_openworld_novelty.py`` reads them: FERL-deep on the retained train vectors, test
against held-out images; mean over folds) and ``--keel``: the 14 multiclass KEEL sets'
leave-one-class-out on the *calibration* parts of the tabular benchmark's folds (seed 0, up to 4
held-out classes per fold; mean over sets), never their test parts.

Usage (about 2 minutes per data set; with ``--exemplars`` CUB-50 takes 30, synthetic 15, KEEL 12 on
2 cores)::

    python scripts/study_typical.py --runs runs/syn runs/cub50 --keel [--exemplars]
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import numpy as np
from sklearn.neighbors import NearestNeighbors

from cbm.concepts import ConceptCalibrator
from cbm.data.concept_tables import load_concept_tables
from cbm.detector.crossfit import CROSSFIT_SPLIT
from cbm.heads.train_concepts import resolve_train_concepts
from ferl import FERLClassifier
from ferl.benchmarks.keel import default_data_root, list_datasets, load_keel
from ferl.benchmarks.ood import KNNDetector
from ferl.benchmarks.ood_kinds import ablation_score
from ferl.benchmarks.protocol import make_splits, scale_fold
from ferl.metrics.ood import ood_auroc
from ferl.novelty.linalg import standardise
from ferl.novelty.ood_score import tail_nats
from ferl.novelty.prototypes import nearest_prototype
from ferl.novelty.scores import reference_rows

#: (k, metric, units, scope) of the exemplar distances compared.
CONFIGS = [(k, m, u, s) for k in (1, 3) for m in ("manhattan", "euclidean") for u in ("raw", "std")
           for s in ("g", "r")]


def top_leaf(clf: FERLClassifier, X: np.ndarray) -> np.ndarray:
    """Position of each row's strongest ungated leaf firing, shape (n,)."""
    tree = clf.tree_
    fired = tree.sparse_firing(X, False, np.ones(tree.n_nodes))
    best, top = np.zeros(X.shape[0]), np.zeros(X.shape[0], dtype=np.int64)
    for o in np.flatnonzero(np.asarray(tree.feature) < 0):
        rows = fired.rows[fired.start[o]:fired.start[o] + fired.count[o]]
        phi = fired.phi0[fired.start[o]:fired.start[o] + fired.count[o]]
        stronger = phi > best[rows]
        best[rows[stronger]], top[rows[stronger]] = phi[stronger], o
    return top


def exemplar_distance(A, B, k, metric, groups=None, skip_self=False) -> np.ndarray:
    """Mean distance from the rows of ``B`` to their ``k`` nearest rows of ``A`` (within the group
    ``groups = (group of A's rows, group of B's rows)`` when given, all of ``A`` for a group too small)."""
    skip = int(skip_self)
    if groups is None:
        return NearestNeighbors(n_neighbors=k + skip, metric=metric).fit(A).kneighbors(B)[0][:, skip:].mean(1)
    out = np.empty(B.shape[0])
    for g in np.unique(groups[1]):
        own = np.flatnonzero(groups[0] == g)
        pool = own if own.size >= k + skip else np.arange(A.shape[0])
        query = groups[1] == g
        out[query] = exemplar_distance(A[pool], B[query], k, metric, None, skip_self)
    return out


def unit_variants(clf: FERLClassifier, X_train: np.ndarray, parts: dict) -> dict:
    """``"typical"`` with the prototype distance in ranges or sds and the leaf term with 0 or R/4."""
    lg, P, ref = clf.leaf_gaussians_, clf.rule_prototypes_, reference_rows(np.ones(X_train.shape[0]))
    sd = np.ones(X_train.shape[1])
    ref_leaf = ablation_score(clf, X_train[ref], "leaf")
    ref_residual = ablation_score(clf, X_train[ref], "residual")
    ref_d = {"": P.reference[1], ", D in sd": np.sort(nearest_prototype(X_train[ref], lg, P.index, sd)[0])}
    out: dict = {}
    for part, X in parts.items():
        leaf, residual = ablation_score(clf, X, "leaf"), ablation_score(clf, X, "residual")
        distance = {"": nearest_prototype(X, lg, P.index, P.unit)[0],
                    ", D in sd": nearest_prototype(X, lg, P.index, sd)[0]}
        for w in (0.0, 0.25):
            t_leaf = tail_nats(np.sort(ref_leaf + w * ref_residual), leaf + w * residual)
            for tag in distance:
                name = "typical" + (", R/4" if w else "") + tag
                out.setdefault(name, {})[part] = t_leaf + tail_nats(ref_d[tag], distance[tag])
        np.testing.assert_allclose(out["typical"][part], clf.ood_score(X, "typical"), rtol=1e-9)
    for kind in ("leaf", "prototype"):
        out[kind] = {part: ablation_score(clf, X, kind) for part, X in parts.items()}
    knn = KNNDetector().fit(X_train)
    out["kNN detector"] = {part: knn.score(X) for part, X in parts.items()}
    return out


def exemplar_variants(clf: FERLClassifier, X_train: np.ndarray, parts: dict) -> dict:
    """The exemplar distances of the module docstring and their Fisher combinations."""
    lg, ref = clf.leaf_gaussians_, reference_rows(np.ones(X_train.shape[0]))
    units = {"raw": X_train, "std": standardise(X_train, lg.center, lg.scale)}
    top_train = top_leaf(clf, X_train)
    out: dict = {}
    for part, X in parts.items():
        queries = {"raw": X, "std": standardise(X, lg.center, lg.scale)}
        top = top_leaf(clf, X)
        t_leaf = tail_nats(clf.rule_prototypes_.reference[0], ablation_score(clf, X, "leaf"))
        typical = clf.ood_score(X, "typical")
        for k, metric, unit, scope in CONFIGS:
            A = units[unit]
            grouped = scope == "r"
            reference = np.sort(exemplar_distance(A, A[ref], k, metric, (top_train, top_train[ref])
                                                  if grouped else None, skip_self=True))
            E = exemplar_distance(A, queries[unit], k, metric, (top_train, top) if grouped else None)
            name = f"{scope}{k}{metric[:2]}{unit}"
            t_E = tail_nats(reference, E)
            out.setdefault(name, {})[part] = E
            out.setdefault(f"leaf+{name}", {})[part] = t_leaf + t_E
            out.setdefault(f"typical+{name}", {})[part] = typical + t_E
    return out


def scores(clf: FERLClassifier, X_train: np.ndarray, parts: dict, exemplars: bool) -> dict:
    """Every score of the module docstring on every part, ``{name: {part: (n,) array}}``."""
    out = unit_variants(clf, X_train, parts)
    return out | exemplar_variants(clf, X_train, parts) if exemplars else out


def run_folders(root: Path, exemplars: bool) -> dict:
    """AUROC per score, one value per fold of an ``evaluate-openworld`` folder."""
    result: dict = {}
    for fold_dir in sorted(root.glob("seed*/fold*")):
        crossfit = (fold_dir / "concepts" / f"{CROSSFIT_SPLIT}.npz").is_file()
        tables = load_concept_tables(fold_dir, splits=("train", "val", "test", "novel")
                                     + ((CROSSFIT_SPLIT,) if crossfit else ()))
        names = tables["train"].concept_names
        with warnings.catch_warnings():  # constant calibration maps of rare concepts
            warnings.simplefilter("ignore")
            cal = ConceptCalibrator().fit(tables["val"].probs, tables["val"].concept_labels, names)
        X = {p: cal.transform(t.probs, names) for p, t in tables.items()}
        if resolve_train_concepts("auto", crossfit) == "cross-fitted":
            X["train"] = X.pop(CROSSFIT_SPLIT)
        clf = FERLClassifier("deep", random_state=int(fold_dir.parent.name[4:]))
        clf.fit(X["train"], tables["train"].y)
        for name, s in scores(clf, X["train"], {"id": X["test"], "ood": X["novel"]}, exemplars).items():
            result.setdefault(name, []).append(100 * ood_auroc(s["id"], s["ood"]))
    return result


def keel(exemplars: bool) -> dict:
    """AUROC per score, one value per multiclass KEEL set (mean over its folds and held-out classes)."""
    root, result = default_data_root(), {}
    for name in list_datasets(root):
        ds = load_keel(root / f"{name}.dat")
        if ds.n_classes < 3:
            continue
        per: dict = {}
        for fold, split in enumerate(make_splits(ds.y, 5, 0)):
            f = scale_fold(ds.X, ds.y, split, ds.n_classes)
            for c in np.random.default_rng(fold).permutation(np.unique(f.y_fit))[:4]:
                keep = f.y_fit != c
                if len(np.unique(f.y_fit[keep])) < 2 or not (f.y_cal == c).any():
                    continue
                clf = FERLClassifier("deep", random_state=fold).fit(f.X_fit[keep], f.y_fit[keep])
                parts = {"id": f.X_cal[f.y_cal != c], "ood": f.X_cal[f.y_cal == c]}
                for key, s in scores(clf, f.X_fit[keep], parts, exemplars).items():
                    per.setdefault(key, []).append(100 * ood_auroc(s["id"], s["ood"]))
        for key, values in per.items():
            result.setdefault(key, []).append(np.mean(values))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, nargs="*", default=[], help="evaluate-openworld folders")
    parser.add_argument("--keel", action="store_true", help="also the KEEL calibration parts")
    parser.add_argument("--exemplars", action="store_true", help="also the exemplar distances (slow)")
    args = parser.parse_args()
    tables = {str(root): run_folders(root, args.exemplars) for root in args.runs}
    if args.keel:
        tables["KEEL (14 multiclass, calibration parts)"] = keel(args.exemplars)
    if not tables:
        raise SystemExit("error: give --runs folders and/or --keel")
    names = list(next(iter(tables.values())))
    print("| score | " + " | ".join(tables) + " |\n|---|" + "---:|" * len(tables))
    for name in names:
        cells = [f"{np.mean(t[name]):.2f} ± {np.std(t[name]):.2f} (min {np.min(t[name]):.1f})"
                 for t in tables.values()]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
