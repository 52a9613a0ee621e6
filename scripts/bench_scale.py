"""How FERL's fit and read-out scale: a CUB-shaped set, the KEEL sets, N, d and C
(docs/results/speed.md).

Every time is CPU time (``time.process_time``) of one thread (the BLAS, OpenMP and numba pools are
pinned to one thread before anything is imported), measured side by side in this run, numba
warm-up excluded; calls shorter than ``--min-time`` are repeated and averaged. Sections:

* ``cub``: a CUB-shaped concept set (seeded: ``--cub-classes`` random binary class signatures over
  ``--cub-d`` concepts, 5 % flips, Gaussian noise 0.1, clipped to [0, 1]; ``--cub-n`` training
  rows, as many held-out rows and as many test rows). Fit / predict / read-out time (three calls
  and one pass), test accuracy and rules of every FERL variant, of ``FERL-deep-c`` (fit-head's
  configuration, `cbm.heads.models.CONCEPT_SETTINGS`, calibrated with ``calibrate_novelty`` on the
  held-out rows as fit-head does), CART and logistic regression (``max_iter=2000``); the product's
  fit and one-pass read-out against LR's ``fit`` and ``predict_proba``, side by side
  (``--product-rounds`` interleaved rounds, the fastest of each), with both accuracies;
  FERL-deep's accuracy-vs-``max_rules`` curve.
* ``keel``: the KEEL sets (stratified folds of min-max scaled data): every FERL variant's fit
  time and credal read-out over CART's fit and ``predict``, the read-out both as three calls
  (``predict_set`` + ``evidence`` + ``ood_score``, "read") and as the one-pass
  ``credal_readout`` that returns the same three outputs ("1-pass"); median and worst set.
* ``scale``: fit time in N (``--n-sizes``, d = 20, C = 5, with CART and HistGradientBoosting),
  in d (``--d-sizes``, N = 20,000, C = 5) and in C (``--c-sizes``, N = 20,000, d = 20), the
  growth exponents (log-log slopes), the read-out (three calls and one pass) on up to 10^5 rows
  (``--rounds`` rounds that call CART's ``predict`` and FERL's read-outs in turn; the fastest of
  each, and the median of the per-round ratios: a virtual machine's neighbours moved a single
  timing's ratio between 4.9 and 12.1 in four runs) and the peak extra memory
  (resident set size above the one before the fit, Linux) at the largest N.
* ``cold``: import and first fit + ``predict_set`` in a fresh process (numba cache warm).

    python scripts/bench_scale.py --quick                  # about a minute
    python scripts/bench_scale.py                          # everything, N up to 10^6
    python scripts/bench_scale.py --sections cub --cub-n 6000
    python scripts/bench_scale.py --sections cub --product-only   # the product against LR only
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from sklearn.datasets import make_classification  # noqa: E402
from sklearn.ensemble import HistGradientBoostingClassifier  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.model_selection import StratifiedKFold  # noqa: E402
from sklearn.preprocessing import MinMaxScaler  # noqa: E402
from sklearn.tree import DecisionTreeClassifier  # noqa: E402

from cbm.heads.models import CONCEPT_SETTINGS  # noqa: E402
from ferl import PRESETS, FERLClassifier  # noqa: E402
from ferl.benchmarks.keel import default_data_root, list_datasets, load_keel  # noqa: E402
from ferl.benchmarks.runner import QUICK_DATASETS  # noqa: E402
from ferl.novelty import default_kind  # noqa: E402

SECTIONS = ("cub", "keel", "scale", "cold")
MAX_REPEATS = 50


def cpu(fn, min_time: float):
    """Mean CPU seconds of ``fn()`` over repeats adding up to ``min_time``, and its last result."""
    total, reps = 0.0, 0
    while True:
        start = time.process_time()
        out = fn()
        total += time.process_time() - start
        reps += 1
        if total >= min_time or reps >= MAX_REPEATS:
            return total / reps, out


def interleaved(fns: dict, rounds: int) -> dict:
    """Fastest CPU seconds of each of ``fns`` over ``rounds`` rounds that call them in turn, and the
    median over rounds of each one's ratio to the first: on a shared (virtual) machine one call
    can take twice another, and calls side by side share what slows them."""
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.process_time()
            fn()
            times[name].append(time.process_time() - start)
    first = np.asarray(next(iter(times.values())))
    return {name: (min(t), float(np.median(np.asarray(t) / first))) for name, t in times.items()}


def readout(model, X):
    """The credal read-out of a FERL model: three calls, as a user makes them."""
    return model.predict_set(X), model.evidence(X), model.ood_score(X)


def one_pass(model, X):
    """The same three outputs from one call (`FERLClassifier.credal_readout`)."""
    return model.credal_readout(X)


def warm_up() -> float:
    """Wall seconds of a first fit and read-out of every variant and of fit-head's learned weights
    (numba compile or cache load)."""
    rng = np.random.default_rng(0)
    X = rng.random((80, 3))
    y = (X[:, 0] > 0.5).astype(int) + (X[:, 1] > 0.5)
    start = time.perf_counter()
    for variant in PRESETS:
        model = FERLClassifier(variant, random_state=0).fit(X, y)
        readout(model, X)
        model.predict(X)
    model = FERLClassifier("deep", random_state=0, **CONCEPT_SETTINGS["deep"]).fit(X, y)  # learned weights
    model.predict(X)
    model.calibrate_novelty(X)
    readout(model, X)
    one_pass(model, X)
    return time.perf_counter() - start


def cub_like(n: int, n_test: int, d: int, n_classes: int, seed: int):
    """CUB-shaped concepts: class signatures over ``d`` binary concepts, 5 % flips, noise 0.1."""
    rng = np.random.default_rng(seed)
    signatures = (rng.random((n_classes, d)) < 0.5).astype(np.float64)

    def draw(m):
        y = rng.permutation(np.arange(m) % n_classes)
        X = signatures[y]
        X = np.where(rng.random((m, d)) < 0.05, 1.0 - X, X)
        return np.clip(X + rng.normal(0.0, 0.1, (m, d)), 0.0, 1.0), y

    return draw(n), draw(n_test)


def tabular(n: int, d: int, n_classes: int, seed: int):
    """Continuous synthetic classes (``make_classification``, 10 informative features at most)."""
    return make_classification(n_samples=n, n_features=d, n_informative=min(d, 10), n_redundant=0,
                               n_classes=n_classes, n_clusters_per_class=1, random_state=seed)


def baselines(seed: int, hgb: bool = False) -> dict:
    models = {"CART": DecisionTreeClassifier(random_state=seed)}
    if hgb:
        models["HistGB"] = HistGradientBoostingClassifier(random_state=seed)
    return models


def n_rules(model) -> str:
    if isinstance(model, FERLClassifier):
        return str(model.n_rules_)
    if isinstance(model, DecisionTreeClassifier):
        return f"{model.get_n_leaves()} leaves"
    return "-"


# ---------------------------------------------------------------------------------------- cub
def section_cub(args) -> None:
    (X, y), (Xt, yt) = cub_like(args.cub_n, 2 * args.cub_n, args.cub_d, args.cub_classes, args.seed)
    (Xv, Xt), yt = (Xt[args.cub_n:], Xt[:args.cub_n]), yt[:args.cub_n]  # half held out for calibration
    print(f"\n## CUB-shaped set: N = {args.cub_n} (+ {args.cub_n} held out, {args.cub_n} test), "
          f"d = {args.cub_d}, C = {args.cub_classes}")
    models = {} if args.product_only else {f"FERL-{v}": FERLClassifier(v, random_state=args.seed)
                                           for v in PRESETS}
    # fit-head's FERL-deep on concept vectors (learned weights of evidence)
    models["FERL-deep-c"] = FERLClassifier("deep", random_state=args.seed, **CONCEPT_SETTINGS["deep"])
    models.update(baselines(args.seed))  # CART: the ratios of the KEEL sections
    models["LR"] = LogisticRegression(max_iter=2000)
    print(f"{'model':14s} {'fit s':>8s} {'predict ms':>11s} {'read-out ms':>12s} {'1-pass ms':>10s} "
          f"{'accuracy':>9s}  rules")
    for name, model in models.items():
        t_fit, _ = cpu(lambda m=model: m.fit(X, y), 0.0)
        model.predict(Xt[:2])  # warm-up: learned weights build their quadrature table once per class count
        t_pred, pred = cpu(lambda m=model: m.predict(Xt), args.min_time)
        t_read = t_one = np.nan
        if isinstance(model, FERLClassifier):
            if name == "FERL-deep-c":  # as fit-head leaves it: the joint score and the discount's point
                model.calibrate_novelty(Xv)
            t_read = cpu(lambda m=model: readout(m, Xt), args.min_time)[0]
            t_one = cpu(lambda m=model: one_pass(m, Xt), args.min_time)[0]
        elif hasattr(model, "predict_proba"):
            t_one = cpu(lambda m=model: m.predict_proba(Xt), args.min_time)[0]
        print(f"{name:14s} {t_fit:8.2f} {1e3 * t_pred:11.1f} {1e3 * t_read:12.1f} {1e3 * t_one:10.1f} "
              f"{100 * np.mean(pred == yt):8.1f}%  {n_rules(model)}", flush=True)
    product_targets(models["FERL-deep-c"], models["LR"], X, y, Xv, Xt, yt, args.product_rounds)
    if args.product_only:
        return
    print("FERL-deep accuracy vs max_rules (is the rule budget what binds?):")
    for budget in args.rule_budgets:
        model = FERLClassifier("deep", max_rules=budget, random_state=args.seed)
        t_fit, _ = cpu(lambda m=model: m.fit(X, y), 0.0)
        print(f"  max_rules {budget:5d}: {model.n_rules_:5d} rules, accuracy "
              f"{100 * np.mean(model.predict(Xt) == yt):5.1f}%, fit {t_fit:6.2f} s", flush=True)


def product_targets(ferl, lr, X, y, Xv, Xt, yt, rounds: int) -> None:
    """Print the product head against logistic regression, side by side: the fastest of ``rounds``
    interleaved rounds of both fits on ``X, y``, then of ``ferl``'s one-pass read-out of ``Xt`` and
    ``lr.predict_proba``, with ``ferl`` calibrated on ``Xv`` as fit-head leaves it, and both
    accuracies on ``Xt, yt``."""
    fits = interleaved({"LR fit": lambda: lr.fit(X, y), "FERL fit": lambda: ferl.fit(X, y)}, rounds)
    ferl.calibrate_novelty(Xv)  # a refit drops it: the read-out's joint score needs it
    reads = interleaved({"LR predict_proba": lambda: lr.predict_proba(Xt),
                         "FERL one pass": lambda: one_pass(ferl, Xt)}, rounds)
    (t_lr, _), (t_ferl, fit_ratio) = fits["LR fit"], fits["FERL fit"]
    (t_pp, _), (t_one, read_ratio) = reads["LR predict_proba"], reads["FERL one pass"]
    acc_ferl, acc_lr = (100 * np.mean(m.predict(Xt) == yt) for m in (ferl, lr))
    print(f"FERL-deep-c (the product, kind {default_kind(ferl)}) against LR (lbfgs, max_iter=2000), "
          f"fastest of {rounds} interleaved rounds (median of the per-round ratios in brackets):")
    print(f"  fit       {t_ferl:7.3f} s  LR {t_lr:7.3f} s  x{t_ferl / t_lr:5.2f} (x{fit_ratio:5.2f})  "
          f"target <= 2 s and <= x1.5")
    print(f"  read-out  {1e3 * t_one:7.1f} ms LR predict_proba {1e3 * t_pp:6.1f} ms  x{t_one / t_pp:5.1f} "
          f"(x{read_ratio:5.1f})  target <= x10")
    print(f"  accuracy  {acc_ferl:5.1f} %  LR {acc_lr:5.1f} %  difference {acc_ferl - acc_lr:+.1f} points "
          f"(target within 1)")


# ---------------------------------------------------------------------------------------- keel
def keel_set(path: Path, folds: int, seed: int, min_time: float) -> dict:
    data = load_keel(path)
    names = ["CART", *PRESETS]
    fit = {k: [] for k in names}
    pred = {k: [] for k in names}
    once = {k: [] for k in PRESETS}
    for tr, te in StratifiedKFold(folds, shuffle=True, random_state=seed).split(data.X, data.y):
        scaler = MinMaxScaler().fit(data.X[tr])
        X_tr, X_te = scaler.transform(data.X[tr]), scaler.transform(data.X[te])
        models = baselines(seed)
        models.update({v: FERLClassifier(v, random_state=seed) for v in PRESETS})
        y_tr = data.y[tr]
        for name, model in models.items():
            fit[name].append(cpu(lambda m=model, a=X_tr, b=y_tr: m.fit(a, b), min_time)[0])
            call = (lambda m=model, a=X_te: m.predict(a)) if name == "CART" else \
                (lambda m=model, a=X_te: readout(m, a))
            pred[name].append(cpu(call, min_time)[0])
            if name in once:
                once[name].append(cpu(lambda m=model, a=X_te: one_pass(m, a), min_time)[0])
    row = {"name": data.name, "n": len(data.y), "d": data.X.shape[1], "C": data.n_classes}
    for v in PRESETS:
        row[f"{v} fit"] = np.mean(fit[v]) / np.mean(fit["CART"])
        row[f"{v} read"] = np.mean(pred[v]) / np.mean(pred["CART"])
        row[f"{v} 1-pass"] = np.mean(once[v]) / np.mean(pred["CART"])
    return row


def section_keel(args) -> None:
    root = args.data_root or default_data_root()
    if root is None:
        print("\n## KEEL: skipped (no data: pass --data-root or set FERL_DATA_ROOT)")
        return
    names = args.datasets or (list(QUICK_DATASETS) if args.quick else list_datasets(root))
    print(f"\n## KEEL sets: {len(names)} sets x {args.folds} folds; ratios over CART's fit and "
          f"predict (read = predict_set + evidence + ood_score, three calls; 1-pass = "
          f"credal_readout, the same outputs from one call)")
    rows = []
    for name in names:
        rows.append(keel_set(Path(root) / f"{name}.dat", args.folds, args.seed, args.min_time))
        r = rows[-1]
        print(f"{name:12s} n={r['n']:6d} d={r['d']:3d} C={r['C']:3d}  "
              + "  ".join(f"{v} fit x{r[f'{v} fit']:5.1f} read x{r[f'{v} read']:5.1f} "
                          f"1-pass x{r[f'{v} 1-pass']:5.1f}" for v in PRESETS), flush=True)
    print("median (worst set) over the sets:")
    for v in PRESETS:
        line = f"  FERL-{v:8s}"
        for key, label in (("fit", "fit"), ("read", "read-out, 3 calls"), ("1-pass", "1 pass")):
            ratios = np.array([r[f"{v} {key}"] for r in rows])
            worst = rows[ratios.argmax()]["name"]
            line += f" {label} x{np.median(ratios):5.1f} (x{ratios.max():5.1f} {worst}) "
        print(line)


# --------------------------------------------------------------------------------------- scale
def _slopes(sizes, times) -> str:
    logs = np.log(np.asarray(sizes, dtype=float)), np.log(np.asarray(times))
    steps = np.diff(logs[1]) / np.diff(logs[0])
    return " ".join(f"{s:.2f}" for s in steps)


def peak_extra_mb(fn) -> float:
    """Peak resident memory above the current one while ``fn()`` runs (MB; NaN off Linux)."""
    status = Path("/proc/self/status")
    if not status.exists():
        fn()
        return np.nan

    def field(name):
        line = next(ln for ln in status.read_text().splitlines() if ln.startswith(name))
        return int(line.split()[1]) / 1024

    Path("/proc/self/clear_refs").write_text("5")  # reset the peak (VmHWM) to the current RSS
    before = field("VmRSS:")
    fn()
    return field("VmHWM:") - before


def section_scale(args) -> None:
    print("\n## Fit time in N (d = 20, C = 5), CPU s")
    times = {"FERL-deep": [], "CART": [], "HistGB": []}
    for n in args.n_sizes:
        X, y = tabular(n, 20, 5, args.seed)
        models = {"FERL-deep": FERLClassifier("deep", random_state=args.seed)}
        models.update(baselines(args.seed, hgb=True))
        line = []
        for name, model in models.items():
            t, _ = cpu(lambda m=model, a=X, b=y: m.fit(a, b), 0.0)
            times[name].append(t)
            line.append(f"{name} {t:8.2f}")
        ratio = times["FERL-deep"][-1] / times["HistGB"][-1]
        print(f"  N = {n:8d}: " + "  ".join(line) + f"  FERL-deep / HistGB x{ratio:.2f}", flush=True)
    for name, t in times.items():
        print(f"  {name:10s} log-log slopes between sizes: {_slopes(args.n_sizes, t)}")
    big = [i for i, n in enumerate(args.n_sizes) if n >= 10_000]
    if len(big) >= 2:
        sizes = np.log(np.asarray(args.n_sizes)[big])
        slope = np.polyfit(sizes, np.log(np.asarray(times["FERL-deep"])[big]), 1)[0]
        print(f"  FERL-deep growth exponent for N >= 10^4 (least squares): {slope:.2f}")
    n = args.n_sizes[-1]
    X, y = tabular(n, 20, 5, args.seed)
    n_read = min(n, 100_000)
    Xr = tabular(n_read, 20, 5, args.seed + 1)[0]
    print(f"\n## Memory and read-out at N = {n} (data {X.nbytes / 2**20:.0f} MB)")
    models = {"FERL-deep": FERLClassifier("deep", random_state=args.seed), **baselines(args.seed, hgb=True)}
    for name, model in models.items():
        extra = peak_extra_mb(lambda m=model: m.fit(X, y))
        print(f"  {name:10s} peak extra memory {extra:7.0f} MB (x{extra / (X.nbytes / 2**20):.2f} data)",
              flush=True)
    ferl = models["FERL-deep"]
    fns = {"CART predict": lambda: models["CART"].predict(Xr),
           "FERL-deep predict": lambda: ferl.predict(Xr),
           "FERL-deep read-out, one pass": lambda: one_pass(ferl, Xr),
           "FERL-deep read-out, three calls": lambda: readout(ferl, Xr)}
    for fn in fns.values():
        fn()  # warm-up
    timed = interleaved(fns, args.rounds)
    print(f"  on {n_read} rows, fastest of {args.rounds} interleaved rounds; ratio to CART's predict: "
          f"of the fastest, and median over rounds")
    for name, (t, ratio) in timed.items():
        print(f"  {name:32s} {1e3 * t:9.1f} ms  x{t / timed['CART predict'][0]:6.2f}  x{ratio:6.2f}")
    for label, key, sizes in (("d", "d", args.d_sizes), ("C", "C", args.c_sizes)):
        print(f"\n## Fit time in {label} (N = {args.dc_n}), CPU s")
        ferl_t, cart_t = [], []
        for size in sizes:
            d, c = (size, 5) if key == "d" else (20, size)
            X, y = tabular(args.dc_n, d, c, args.seed)
            ferl = FERLClassifier("deep", random_state=args.seed)
            cart = DecisionTreeClassifier(random_state=args.seed)
            ferl_t.append(cpu(lambda m=ferl, a=X, b=y: m.fit(a, b), 0.0)[0])
            cart_t.append(cpu(lambda m=cart, a=X, b=y: m.fit(a, b), 0.0)[0])
            print(f"  {label} = {size:5d}: FERL-deep {ferl_t[-1]:7.2f}  CART {cart_t[-1]:7.2f}  "
                  f"x{ferl_t[-1] / cart_t[-1]:.1f}", flush=True)
        print(f"  log-log slopes: FERL-deep {_slopes(sizes, ferl_t)}  CART {_slopes(sizes, cart_t)}")


# ---------------------------------------------------------------------------------------- cold
COLD = """
import time
t0, c0 = time.perf_counter(), time.process_time()
import numpy as np
from ferl import FERLClassifier
t1, c1 = time.perf_counter(), time.process_time()
rng = np.random.default_rng(0)
X = rng.random((500, 8)); y = (X[:, 0] + X[:, 1] > 1).astype(int)
FERLClassifier("deep", random_state=0).fit(X, y).predict_set(X)
t2, c2 = time.perf_counter(), time.process_time()
print(t1 - t0, c1 - c0, t2 - t1, c2 - c1)
"""


def section_cold(args) -> None:
    print("\n## Cold start: fresh process, numba cache warm (CPU s, wall s in brackets)")
    for attempt in ("cache fill", "measured"):
        out = subprocess.run([sys.executable, "-c", COLD], capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        wall_imp, cpu_imp, wall_fit, cpu_fit = (float(v) for v in out.stdout.split())
        print(f"  {attempt:10s}: import ferl {cpu_imp:.2f} ({wall_imp:.2f}), first FERL-deep fit + "
              f"predict_set {cpu_fit:.2f} ({wall_fit:.2f})")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ints = lambda s: [int(float(v)) for v in s.split(",")]  # noqa: E731
    p.add_argument("--quick", action="store_true", help="small sizes, 6 KEEL sets x 2 folds (about a minute)")
    p.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated, from {SECTIONS}")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--min-time", type=float, default=None,
                   help="repeat shorter calls up to this many CPU seconds (default 0.05; 0.01 quick)")
    p.add_argument("--cub-n", type=int, default=None, help="training rows (default 6000; 2000 quick)")
    p.add_argument("--cub-d", type=int, default=112)
    p.add_argument("--cub-classes", type=int, default=200)
    p.add_argument("--product-rounds", type=int, default=3,
                   help="interleaved rounds of the product's fit and read-out against LR's")
    p.add_argument("--product-only", action="store_true",
                   help="cub: the product, CART and LR only, without the accuracy-vs-max_rules curve")
    p.add_argument("--rule-budgets", type=ints, default=None, help="default 50,100,200,400,800")
    p.add_argument("--data-root", type=Path, default=None)
    p.add_argument("--datasets", type=lambda s: s.split(","), default=None)
    p.add_argument("--folds", type=int, default=None, help="default 5; 2 quick")
    p.add_argument("--n-sizes", type=ints, default=None, help="default 1e3,1e4,1e5,1e6; quick to 1e5")
    p.add_argument("--rounds", type=int, default=9, help="interleaved rounds of the 10^5-row read-out")
    p.add_argument("--d-sizes", type=ints, default=None, help="default 10,100,1000; quick 10,100")
    p.add_argument("--c-sizes", type=ints, default=None, help="default 2,20,200")
    p.add_argument("--dc-n", type=int, default=None, help="N of the d and C sweeps (20000; 5000 quick)")
    args = p.parse_args(argv)
    q = args.quick
    defaults = dict(min_time=0.01 if q else 0.05, cub_n=2000 if q else 6000,
                    rule_budgets=[50, 200, 800] if q else [50, 100, 200, 400, 800],
                    folds=2 if q else 5, n_sizes=[1000, 10_000, 100_000] if q else
                    [1000, 10_000, 100_000, 1_000_000], d_sizes=[10, 100] if q else [10, 100, 1000],
                    c_sizes=[2, 20, 200], dc_n=5000 if q else 20_000)
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.sections = args.sections.split(",")
    unknown = set(args.sections) - set(SECTIONS)
    if unknown:
        p.error(f"unknown sections {sorted(unknown)}; choose from {SECTIONS}")
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    print(f"numba warm-up (compile or cache load), all variants: {warm_up():.2f} s wall")
    run = {"cub": section_cub, "keel": section_keel, "scale": section_scale, "cold": section_cold}
    for name in args.sections:
        run[name](args)


if __name__ == "__main__":
    main()
