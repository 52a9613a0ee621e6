"""The kinds of OOD score and the scores that need no per-feature split (beyond the paper, but for
the paper's ``residual``, ``firing`` and ignorance).

**The kinds.** `FERLClassifier.ood_score` and ``credal_readout`` take the product's kinds,
`OOD_KINDS`: ``typical`` (the tails of the leaf Gaussians' score and of the nearest rule prototype's
distance, `ferl.novelty.prototypes`), ``joint`` (below; models with learned weights of evidence
after ``calibrate_novelty``) and ``energy`` (the learned weights' ``-log sum_k exp(w_k(x))``). The
read-out computes seven more, the ablations of `ABLATION_KINDS` (the paper's ignorance
``m(Theta)``, residual and firing scores, the parts and predecessors of ``typical``): benchmarks and
ablation studies read them through `ferl.benchmarks.ood_kinds.ablation_score`. Every output of the
product (``ood_score``'s default, the novelty threshold of a head, the novelty discount,
``predict``'s flag, ``explain``, the reports) uses the kind `default_kind` picks.

**The totals** (`score_totals`). `ferl.novelty.scores.Novelty` keeps every signal split over the
features, which `anomalous_features` and `explain` need; `ood_score` needs only the totals its kind
sums. One pass over the firings gives the residual ``R(x)`` and the routing mass lost ``1 -
firing(x)`` (`ferl.novelty.free_gaussians.residual_totals`), and
`ferl.novelty.leaf_gaussians.leaf_totals` the leaf term ``T(x)``; the kinds then combine them with
the formulas of `ferl.novelty.scores.Novelty.score` (equal to its scores up to round-off: the
totals are summed node by node rather than feature by feature). It replaced the per-feature path in
``ood_score`` (``tests/ferl/test_readout_parity.py`` pins the values to it) and cut the cost of the
three-call read-out (``predict_set`` + ``evidence`` + ``ood_score``) over CART's ``predict`` by
nearly half for every variant (``python scripts/bench_scale.py --sections keel``; figures in
docs/results/speed.md).

**Tails** (`tail_nats`): the upper-tail probability of a score among reference scores, in nats,
Fisher's method of ``typical`` (`ferl.novelty.prototypes`).

**The ``joint`` score**: an input's typicality and its class evidence, read together. Two signals
catch different novel inputs. The ``typical`` score asks how far an input's concepts lie from the
training rows its rules cover; the learned weights of evidence's ``energy``
(`ferl.evidence.weights.evidence_energy`) asks how little evidence the input gives any class. On
real concept vectors the second ranks held-out classes well and the first poorly; on the synthetic
world the reverse. ``joint`` standardises each on held-out in-distribution inputs (mean and
standard deviation, `fit_reference`) and sums them, so neither scale dominates:

    ``joint(x) = (t(x) - mu_t) / sd_t + (e(x) - mu_e) / sd_e``.

Equal weights, chosen by measurement rather than fitted: the open-world runs hold no held-out
class at calibration time, and a weight tuned on their test folds would not generalise. Fisher's
sum of the two tail probabilities was the alternative measured; it ranked held-out classes
slightly worse on both worlds (docs/results/novelty.md, "The product's score").
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ferl.novelty.free_gaussians import free_gaussians, residual_totals
from ferl.novelty.leaf_gaussians import LeafGaussians, leaf_totals
from ferl.novelty.linalg import standardise
from ferl.tree.firing import Firing
from ferl.tree.fuzzy_tree import FuzzyTree

__all__ = ["ABLATION_KINDS", "FIRING_EPS", "LEAF_RESIDUAL", "LEAF_TERM_KINDS", "MIN_SPREAD", "OOD_KINDS",
           "RESIDUAL_WEIGHT", "ROUND_OFF", "SCORE_KINDS", "TOTAL_KINDS", "check_kind", "default_kind",
           "fit_reference", "joint_score", "kind_score", "score_totals", "spread_ok", "tail_nats",
           "typical_score", "typical_tails"]

#: Kinds of ``FERLClassifier.ood_score``, the default first.
OOD_KINDS = ("typical", "joint", "energy")
#: Kinds the read-out computes for ablation studies only (`ferl.benchmarks.ood_kinds.ablation_score`).
ABLATION_KINDS = ("ignorance", "leaf", "nll", "combined", "residual", "firing", "prototype")
#: Every kind the read-out computes (`ferl.readout.batch.read_out`).
SCORE_KINDS = OOD_KINDS + ABLATION_KINDS

#: ``epsilon`` of the ``-log(epsilon + firing)`` term (bounds it by ``log(1/epsilon)``).
FIRING_EPS = 1e-3
#: Weight of the free-feature residual ``R`` in the ``"leaf"`` score (module docstring: how chosen).
LEAF_RESIDUAL = 0.0
#: Weight of the residual ``R`` in each kind that holds it.
RESIDUAL_WEIGHT = {"leaf": LEAF_RESIDUAL, "nll": 0.5, "combined": 0.5, "residual": 1.0}
#: Kinds that hold the leaf Gaussians' term ``T / d``.
LEAF_TERM_KINDS = ("leaf", "nll")

#: The kinds of `ferl.novelty.scores.Novelty.score` that `score_totals` computes (``"ignorance"`` is the
#: evidence's).
TOTAL_KINDS = ("leaf", "nll", "combined", "residual", "firing")


def default_kind(model) -> str:
    """The kind of OOD score the product uses for a fitted model.

    Parameters
    ----------
    model : FERLClassifier
        A fitted model.

    Returns
    -------
    str
        ``"typical"`` for the tree's evidence; with learned weights of evidence ``"joint"`` once
        ``calibrate_novelty`` has given held-out reference inputs (``novelty_reference_``), else
        ``"energy"``. How chosen: on the open worlds (held-out classes, 3 seeds x 5 folds) the
        class evidence's energy ranked CUB-50's held-out classes above every baseline while
        ``typical`` trailed, and ``typical`` led on the synthetic world while the energy trailed
        Isolation Forest; their standardised sum was ahead of every baseline on both
        (docs/results/novelty.md, "The product's score").
    """
    if getattr(model, "evidence_weights_", None) is None:
        return "typical"
    return "joint" if getattr(model, "novelty_reference_", None) is not None else "energy"


def check_kind(kind, what: str = "OOD score kind") -> str:
    """``kind`` when it is one of `OOD_KINDS`, else ValueError.

    Parameters
    ----------
    kind : object
        The kind asked for.
    what : str, default="OOD score kind"
        What the kind is, for the message.

    Returns
    -------
    str
        ``kind``.

    Raises
    ------
    ValueError
        ``kind`` is not one of `OOD_KINDS`; for an ablation kind the message names
        `ferl.benchmarks.ood_kinds.ablation_score`, which still computes it.
    """
    if isinstance(kind, str) and kind in OOD_KINDS:
        return kind
    if isinstance(kind, str) and kind in ABLATION_KINDS:
        raise ValueError(f"{what} {kind!r} is an ablation, not one of the product's kinds {list(OOD_KINDS)}; "
                         f"ablation studies read it with ferl.benchmarks.ood_kinds.ablation_score(model, X, "
                         f"{kind!r})")
    raise ValueError(f"unknown {what} {kind!r}; expected one of {list(OOD_KINDS)}")


def score_totals(tree: FuzzyTree, leaves: LeafGaussians, X: np.ndarray, fired: Firing, kind: str,
                 want_nll: bool = False):
    """OOD score of kind ``kind`` of validated inputs from their sparse firings.

    The formulas are those of `ferl.novelty.scores.Novelty.score` (section 3.1, eq. 3 and 8, and the leaf
    Gaussians beyond the paper): with ``F = log(1 + eps) - log(eps + firing)`` where mass is lost
    (0 where none is), ``"leaf"`` is ``T / d + LEAF_RESIDUAL R + F``, ``"nll"`` ``T / d + R / 2 + F``,
    ``"combined"`` ``R / 2 + F``, ``"residual"`` ``R`` and ``"firing"`` ``1 - firing``.

    Parameters
    ----------
    tree : FuzzyTree
        A fitted tree with free-feature Gaussians.
    leaves : LeafGaussians
        Its leaf Gaussians.
    X : ndarray of shape (n_samples, n_features), float64, finite
    fired : Firing
        The sparse firings of ``X``, gates as configured.
    kind : {"leaf", "nll", "combined", "residual", "firing"}
    want_nll : bool, default=False
        Also return the per-leaf NLLs (`ferl.novelty.leaf_gaussians.leaf_totals`), computed in the same pass
        when ``kind`` is ``"leaf"`` or ``"nll"``.

    Returns
    -------
    score : ndarray of shape (n_samples,), float64 >= 0, finite
    nll : ndarray of shape (n_samples, L) or None
        None unless ``want_nll``.

    Raises
    ------
    ValueError
        ``kind`` not in `TOTAL_KINDS`, or a tree without free-feature Gaussians.
    """
    if kind not in TOTAL_KINDS:
        raise ValueError(f"score_totals computes the kinds {list(TOTAL_KINDS)}, not {kind!r}")
    mean, inv_sd, _, n_free = free_gaussians(tree)
    X = np.ascontiguousarray(X, dtype=np.float64)
    lost, residual = residual_totals(X, fired.start, fired.count, fired.rows, fired.phi0, fired.lost,
                                     tree.feature, n_free, mean, inv_sd, RESIDUAL_WEIGHT.get(kind, 0.0) > 0)
    total = nll = None
    if kind in LEAF_TERM_KINDS or want_nll:
        total, nll = leaf_totals(leaves, standardise(X, leaves.center, leaves.scale), fired, want_nll)
    return kind_score(kind, lost, residual, total, X.shape[1]), nll


def kind_score(kind: str, lost: np.ndarray, residual: np.ndarray, total: np.ndarray | None,
               d: int) -> np.ndarray:
    """The score of kind ``kind`` (`TOTAL_KINDS`) from its totals, by the formulas of `score_totals`.

    Parameters
    ----------
    kind : {"leaf", "nll", "combined", "residual", "firing"}
    lost : ndarray of shape (n,), float64 in [0, 1]
        The routing mass lost to the gates, ``1 - firing`` (eq. 8).
    residual : ndarray of shape (n,), float64 >= 0
        The residual ``R`` (eq. 3; zeros where the kind's weight of it is 0).
    total : ndarray of shape (n,), float64 >= 0, or None
        The leaf term ``T`` (`ferl.novelty.leaf_gaussians.leaf_totals`); needed by ``"leaf"`` and
        ``"nll"`` only.
    d : int
        The number of features.

    Returns
    -------
    ndarray of shape (n,), float64 >= 0, finite
    """
    if kind == "firing":
        return lost
    firing = np.maximum(1.0 - lost, 0.0)
    term = np.where(lost > 0.0, np.log1p(FIRING_EPS) - np.log(FIRING_EPS + firing), 0.0)
    if kind == "residual":
        return residual
    score = RESIDUAL_WEIGHT[kind] * residual + term
    if kind in LEAF_TERM_KINDS:
        score += total / d
    return score


#: Tolerance of `tail_nats`' comparison with the reference scores: relative, absolute below 1.
ROUND_OFF = 1e-9


def tail_nats(reference: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """``t(s)`` of the module docstring: the negative log upper-tail probability of ``scores``.

    Parameters
    ----------
    reference : ndarray of shape (m,), float64, sorted, finite, ``m >= 1``
    scores : ndarray of shape (n,), float64

    Returns
    -------
    ndarray of shape (n,), float64 >= 0, finite for finite or infinite scores, NaN for NaN
        ``-log((1 + #{ref >= s - 1e-9 max(|s|, 1)}) / (m + 1))`` (`ROUND_OFF`), plus
        ``log(1 + (s - ref[-1]) / lambda)`` above the largest reference score
        (``lambda = ref[-1] - median(ref)``; 1 when that is 0).
    """
    m = reference.size  # the median in halves: two scores above half the float maximum overflow
    lam = float(reference[-1] - (reference[(m - 1) // 2] / 2 + reference[m // 2] / 2))
    lam = lam if lam > 0 else 1.0  # halving a subnormal reference rounds: -5e-324 gave lambda < 0, -inf
    return _tail(np.ascontiguousarray(reference, dtype=np.float64),
                 np.ascontiguousarray(scores, dtype=np.float64), lam)


@njit(cache=True)
def _tail(reference, scores, lam):
    m, low, top, big = reference.size, reference[0], reference[-1], np.finfo(np.float64).max
    # the first reference at or above each of m equal cells of [low, top], so that finding a
    # score's place scans a cell instead of bisecting (a binary search was slower: docs/results/speed.md)
    width = (top - low) / m if top > low else 1.0
    first = np.empty(m + 1, dtype=np.int64)
    at = 0
    for c in range(m + 1):
        while at < m and reference[at] < low + c * width:
            at += 1
        first[c] = at
    out = np.empty(scores.size)
    for i in range(scores.size):
        s = scores[i]
        if s != s:  # NaN has no place among the references (int(NaN) indexed out of bounds)
            out[i] = s
            continue
        # a reference score counts from a relative 1e-9 below it, so that a training row read out
        # by another path (sums in another order) finds itself in the reference (inf - inf is NaN)
        t = s - ROUND_OFF * max(abs(s), 1.0) if abs(s) <= big else s
        if t <= low:
            at = 0
        elif t > top:
            at = m
        else:
            at = first[min(int((t - low) / width), m)]
            while at > 0 and reference[at - 1] >= t:
                at -= 1
            while at < m and reference[at] < t:
                at += 1
        nats = np.log((m + 1.0) / (m - at + 1.0))
        if s > top:
            nats += np.log1p(min((s - top) / lam, big))
        out[i] = min(nats, big)
    return out


def typical_score(reference: np.ndarray, leaf_score: np.ndarray, distance: np.ndarray) -> np.ndarray:
    """The ``"typical"`` score ``t_leaf + t_D`` (`ferl.novelty.prototypes`, beyond the paper): Fisher's
    sum of the tails (`typical_tails`) of the ``"leaf"`` scores ``leaf_score`` (n,) and the prototype
    distances ``distance`` (n,) among the reference's; ndarray of shape (n,), float64 >= 0, finite."""
    return np.minimum(typical_tails(reference, leaf_score, distance).sum(axis=1), np.finfo(np.float64).max)


def typical_tails(reference: np.ndarray, leaf_score: np.ndarray, distance: np.ndarray) -> np.ndarray:
    """``(t_leaf, t_D)``, ndarray of shape (n, 2), float64 >= 0: `tail_nats` of the ``"leaf"`` scores
    ``leaf_score`` (n,) and of the prototype distances ``distance`` (n,)
    against the two rows of ``reference`` (`ferl.novelty.prototypes.RulePrototypes.reference`)."""
    leaf_ref, distance_ref = reference
    return np.stack([tail_nats(leaf_ref, leaf_score), tail_nats(distance_ref, distance)], axis=1)


#: The least standard deviation, relative to the score's scale, that the reference may have.
MIN_SPREAD = 1e-6


def fit_reference(typical: np.ndarray, energy: np.ndarray) -> np.ndarray:
    """``(mu_t, sd_t, mu_e, sd_e)`` of held-out in-distribution inputs' scores.

    Parameters
    ----------
    typical, energy : ndarray of shape (m,), float64, finite, ``m >= 2``
        The ``typical`` and ``energy`` scores of the held-out inputs.

    Returns
    -------
    ndarray of shape (4,), float64; both standard deviations above `MIN_SPREAD` times the score's
    scale.

    Raises
    ------
    ValueError
        Fewer than two inputs, arrays of other shapes, non-finite scores, or a score without spread
        among the inputs (identical rows: its standardisation would blow up).
    """
    t, e = np.asarray(typical, dtype=np.float64), np.asarray(energy, dtype=np.float64)
    if t.ndim != 1 or t.shape != e.shape or t.size < 2:
        raise ValueError(f"fit_reference needs two 1-d arrays of one length >= 2, got {t.shape} and "
                         f"{e.shape}")
    if not (np.isfinite(t).all() and np.isfinite(e).all()):
        raise ValueError("fit_reference needs finite scores")

    reference = np.array([t.mean(), t.std(), e.mean(), e.std()])
    if not spread_ok(reference):
        raise ValueError("the held-out inputs give the typical or the energy score no spread (identical "
                         "rows?): calibrate on varied in-distribution inputs, e.g. the validation split")
    return reference


def spread_ok(reference: np.ndarray) -> bool:
    """Whether both standard deviations of ``(mu_t, sd_t, mu_e, sd_e)`` exceed `MIN_SPREAD` times
    their score's scale (``max(|mu|, 1)``)."""
    mu, sd = reference[[0, 2]], reference[[1, 3]]
    return bool(np.all(sd > MIN_SPREAD * np.maximum(np.abs(mu), 1.0)))


def joint_score(typical: np.ndarray, energy: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """``(t - mu_t) / sd_t + (e - mu_e) / sd_e`` of the module docstring.

    Parameters
    ----------
    typical, energy : ndarray of shape (n,), float64
    reference : ndarray of shape (4,)
        `fit_reference`'s ``(mu_t, sd_t, mu_e, sd_e)``.

    Returns
    -------
    ndarray of shape (n,), float64, finite for finite inputs; higher means more novel.
    """
    return (typical - reference[0]) / reference[1] + (energy - reference[2]) / reference[3]
