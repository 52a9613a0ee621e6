"""Every output of fitted FERL models, saved from one version of the code and compared with another's.

For a speed change that must keep the outputs: run ``--save`` on the code before it and
``--against`` on the code after it (same data, same seeds). The models: FERL-deep with fit-head's
concept settings (`cbm.heads.models.CONCEPT_SETTINGS`, learned weights of evidence, calibrated
with ``calibrate_sets`` and ``calibrate_novelty`` on held-out rows as fit-head does) and the three
presets, on the CUB-shaped set of ``scripts/bench_scale.py`` (``--cub-n`` training, held-out and
test rows) and on KEEL sets (the first stratified fold, min-max scaled). The outputs: ``predict``,
``predict_proba``, the evidence (masses, ignorance, conflict, belief, plausibility), the paper's
and the 0.9-coverage credal sets, every OOD score kind, ``credal_readout``, and the fitted state
(the tree's thresholds, the leaf Gaussians, the prototypes' reference scores, the weights of
evidence). The comparison prints, per output, whether it is bit for bit the same, else the largest
absolute difference, and for the arg-max and the sets how many rows differ; it exits with status 1
when an output differs by more than ``--tol`` (0: bit for bit), or any prediction or set differs.

    python scripts/compare_outputs.py --save /tmp/before.npz        # on the code before
    python scripts/compare_outputs.py --against /tmp/before.npz     # on the code after
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from sklearn.model_selection import StratifiedKFold  # noqa: E402
from sklearn.preprocessing import MinMaxScaler  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_scale import cub_like  # noqa: E402

from cbm.heads.models import CONCEPT_SETTINGS  # noqa: E402
from ferl import PRESETS, FERLClassifier  # noqa: E402
from ferl.benchmarks.keel import default_data_root, load_keel  # noqa: E402
from ferl.novelty.ood_score import SCORE_KINDS  # noqa: E402

#: Outputs compared by value; every other one must be equal (labels, sets).
DISCRETE = ("predict", "set", "set_cov", "readout_set")


def outputs(model: FERLClassifier, X: np.ndarray) -> dict:
    """Every read-out of ``model`` on ``X`` and its fitted state, by name."""
    out = {"predict": model.predict(X), "proba": model.predict_proba(X), "set": model.predict_set(X)}
    ev = model.evidence(X)
    for name in ("mass", "ignorance", "conflict", "belief", "plausibility", "pignistic"):
        out[f"evidence_{name}"] = getattr(ev, name)
    if model.set_scores_ is not None:
        out["set_cov"] = model.predict_set(X, coverage=0.9)
    for kind in SCORE_KINDS:
        try:
            out[f"ood_{kind}"] = model.ood_score(X, kind)
        except ValueError:  # energy and joint need learned weights (joint also its calibration)
            continue
    one = model.credal_readout(X)
    out["readout_set"], out["readout_score"] = one.credal_set, one.ood_score
    out["readout_pignistic"] = one.evidence.pignistic
    tree, leaves = model.tree_, model.leaf_gaussians_
    out.update(tree_threshold=np.asarray(tree.threshold), leaf_mean=leaves.mean, leaf_cov=leaves.cov,
               leaf_reliability=leaves.reliability, prototype_reference=model.rule_prototypes_.reference)
    if model.evidence_weights_ is not None:
        out["weights_coef"] = model.evidence_weights_.coef
    return out


def models(seed: int) -> dict:
    found = {f"FERL-{v}": FERLClassifier(v, random_state=seed) for v in PRESETS}
    found["FERL-deep-c"] = FERLClassifier("deep", random_state=seed, **CONCEPT_SETTINGS["deep"])
    return found


def splits(args):
    """(name, train X, y, held-out X, y, test X) of the CUB-shaped set and the KEEL sets."""
    (X, y), (Xt, yt) = cub_like(args.cub_n, 2 * args.cub_n, 112, 200, args.seed)
    yield "cub", X, y, Xt[args.cub_n:], yt[args.cub_n:], Xt[:args.cub_n]
    root = Path(args.data_root or default_data_root())
    for name in args.datasets:
        data = load_keel(root / f"{name}.dat")
        rest, test = next(StratifiedKFold(3, shuffle=True, random_state=args.seed).split(data.X, data.y))
        scaler = MinMaxScaler().fit(data.X[rest])
        Xr, yr = scaler.transform(data.X[rest]), data.y[rest]
        half = len(rest) // 2
        yield name, Xr[:half], yr[:half], Xr[half:], yr[half:], scaler.transform(data.X[test])


def collect(args) -> dict:
    found = {}
    for name, X, y, Xv, yv, Xt in splits(args):
        for label, model in models(args.seed).items():
            model.fit(X, y)
            seen = np.isin(yv, model.classes_)
            model.calibrate_sets(Xv[seen], yv[seen])
            if model.evidence_weights_ is not None:
                model.calibrate_novelty(Xv)
            for key, value in outputs(model, Xt).items():
                found[f"{name}/{label}/{key}"] = np.asarray(value)
            print(f"  {name} {label}: {model.n_rules_} rules", flush=True)
    return found


def same(a: np.ndarray, b: np.ndarray | None) -> bool:
    """Bit for bit the same array (NaN where the other has NaN: a leaf's threshold)."""
    return b is not None and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")


def compare(before: dict, after: dict, tol: float) -> bool:
    """Print the differences; True when within ``tol`` and every label and set is equal."""
    ok = True
    for key in sorted(before):
        a, b = before[key], after.get(key)
        if b is None or a.shape != b.shape:
            print(f"  {key}: missing or of another shape")
            ok = False
            continue
        if same(a, b):
            continue
        if key.rsplit("/", 1)[1] in DISCRETE:
            rows = int((a != b).reshape(a.shape[0], -1).any(axis=1).sum())
            print(f"  {key}: {rows} of {a.shape[0]} rows differ")
            ok = False
            continue
        diff = float(np.nanmax(np.abs(a.astype(np.float64) - b.astype(np.float64))))
        scale = float(np.nanmax(np.abs(a))) or 1.0
        print(f"  {key}: max |difference| {diff:.3g} (relative to its largest value {diff / scale:.3g})")
        ok &= diff <= tol * max(scale, 1.0)
    print("bit for bit" if all(same(before[k], after.get(k)) for k in before)
          else f"within the tolerance {tol:g} (labels and sets equal): {ok}")
    return ok


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--save", type=Path, help="write the outputs to this .npz")
    p.add_argument("--against", type=Path, help="compare with the outputs of this .npz")
    p.add_argument("--tol", type=float, default=0.0, help="largest accepted difference, relative to "
                   "the output's largest value where that exceeds 1 (default 0: bit for bit)")
    p.add_argument("--cub-n", type=int, default=6000)
    p.add_argument("--datasets", type=lambda s: s.split(","), default=["wine", "segment", "vowel"])
    p.add_argument("--data-root", type=Path, default=None)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if (args.save is None) == (args.against is None):
        p.error("give one of --save and --against")
    found = collect(args)
    if args.save:
        np.savez_compressed(args.save, **found)
        print(f"saved {len(found)} outputs to {args.save}")
        return
    sys.exit(0 if compare(dict(np.load(args.against)), found, args.tol) else 1)


if __name__ == "__main__":
    main()
