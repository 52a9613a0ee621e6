"""Where the product's FERL head spends its time: the fit and the one-pass read-out, phase by phase.

FERL-deep with fit-head's concept settings (`cbm.heads.models.CONCEPT_SETTINGS`) on the CUB-shaped
set of ``scripts/bench_scale.py`` (the same seeded data), profiled with `cProfile` on one thread
(the BLAS, OpenMP and numba pools are pinned before anything is imported), numba warm-up
excluded. Each phase is the cumulative time of the functions that implement it (`PHASES`); a
numba kernel shows as one call, so its phase is all of it. The fit's phases nest in
``FERLClassifier.fit``, the read-out's in ``FERLClassifier.credal_readout``; what no phase names is
the remainder. ``--top`` also prints the profile's own table.

    python scripts/profile_head.py                  # 6,000 rows, 112 concepts, 200 classes
    python scripts/profile_head.py --top 30
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import cProfile  # noqa: E402
import pstats  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_scale import cub_like, warm_up  # noqa: E402

from cbm.heads.models import CONCEPT_SETTINGS  # noqa: E402
from ferl import FERLClassifier  # noqa: E402

#: (phase, functions as ``(file suffix, function name)``): the fit's phases, then the read-out's.
PHASES = {
    "fit": (
        ("split search (bootstrap cuts, gains)", (("tree/splitter.py", "best_learned_split"),)),
        ("tree growth, the rest (binning, children's rows)",
         (("tree/builder.py", "grow_tree"),)),
        ("training firing", (("tree/fuzzy_tree.py", "training_firing"),)),
        ("free-feature Gaussians (eq. 3)", (("novelty/free_gaussians.py", "fit_free_gaussians"),)),
        ("leaf Gaussians: moments, covariances, cross-fitted NLLs",
         (("novelty/leaf_fit.py", "fit_kernel"),)),
        ("leaf Gaussians: cross-fitted path residual",
         (("novelty/cross_fit.py", "cross_fitted_path_residual"),)),
        ("leaf Gaussians: whitening (eigh)", (("novelty/linalg.py", "whitening"),)),
        ("evidence weights (lbfgs)", (("evidence/weights.py", "fit_evidence_weights"),)),
        ("rule prototypes and reference scores", (("novelty/prototypes.py", "fit_rule_prototypes"),)),
    ),
    "read-out": (
        ("firing", (("tree/fuzzy_tree.py", "sparse_firing"),)),
        ("weight sums (two products)", (("evidence/weights.py", "_weight_sums"),)),
        ("combination, pignistic integral, energy (one kernel)",
         (("evidence/combination.py", "combine_weights"),)),
        ("evidence from weights, the rest", (("evidence/weights.py", "evidence_from_weights"),)),
        ("novelty scores (leaf, typical, joint)", (("novelty/ood_score.py", "score_totals"),
                                                   ("novelty/prototypes.py", "prototype_kind"),
                                                   ("novelty/ood_score.py", "joint_score"))),
        ("credal set", (("readout/mixin.py", "_credal_set"),)),
    ),
}
#: Phases whose functions call those of other phases: their time is net of those.
NESTED = {"tree growth, the rest (binning, children's rows)": ("split search (bootstrap cuts, gains)",),
          "evidence from weights, the rest": ("weight sums (two products)",
                                              "combination, pignistic integral, energy (one kernel)")}


def cumulative(stats: pstats.Stats, suffix: str, name: str) -> float:
    """Cumulative seconds of the function ``name`` defined in a file ending in ``suffix``."""
    return sum(row[3] for (file, _, func), row in stats.stats.items()
               if func == name and file.replace(os.sep, "/").endswith(suffix))


def breakdown(stats: pstats.Stats, phases, total: float) -> None:
    """Print every phase's seconds and share of ``total``, with the remainder."""
    own = {label: sum(cumulative(stats, *fn) for fn in fns) for label, fns in phases}
    for outer, inner in NESTED.items():  # in order: an inner phase is net before its outer one
        if outer in own:
            own[outer] -= sum(own[label] for label in inner)
    for label, seconds in own.items():
        print(f"  {label:58s} {seconds:7.3f} s  {100 * seconds / total:5.1f} %")
    rest = total - sum(own.values())
    print(f"  {'the rest':58s} {rest:7.3f} s  {100 * rest / total:5.1f} %")


def profiled(fn):
    """``fn()`` under `cProfile`: its stats and total seconds."""
    profile = cProfile.Profile()
    profile.enable()
    fn()
    profile.disable()
    stats = pstats.Stats(profile)
    return stats, stats.total_tt


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cub-n", type=int, default=6000)
    p.add_argument("--cub-d", type=int, default=112)
    p.add_argument("--cub-classes", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--top", type=int, default=0, help="also print the profile's top functions")
    args = p.parse_args(argv)
    warm_up()
    (X, y), (Xt, _) = cub_like(args.cub_n, 2 * args.cub_n, args.cub_d, args.cub_classes, args.seed)
    Xv, Xt = Xt[args.cub_n:], Xt[:args.cub_n]
    model = FERLClassifier("deep", random_state=args.seed, **CONCEPT_SETTINGS["deep"])
    model.fit(X, y)  # a first fit: the quadrature table and numpy's caches
    for name, call in (("fit", lambda: model.fit(X, y)), ("read-out", lambda: model.credal_readout(Xt))):
        if name == "read-out":
            model.calibrate_novelty(Xv)  # as fit-head leaves the head: the joint score
            model.credal_readout(Xt)
        stats, total = profiled(call)
        print(f"\n## {name} of FERL-deep-c, N = {X.shape[0]}, d = {X.shape[1]}, C = {args.cub_classes}: "
              f"{total:.3f} s under cProfile")
        breakdown(stats, PHASES[name], total)
        if args.top:
            stats.sort_stats("cumulative").print_stats(args.top)


if __name__ == "__main__":
    main()
