"""Rule prototypes: how far an input lies from the typical input of its nearest rule (beyond the paper).

Every leaf (rule) ``l`` that holds at least `MIN_SUPPORT` training rows (soft count, ungated
firing) is a *prototype*: its leaf Gaussian's mean ``mu_l`` (`ferl.novelty.leaf_gaussians`, the
firing-weighted training mean in standardised units ``u = (x - center) / scale``). The
**prototype distance** of an input is the L1 distance to the nearest prototype in units of each
feature's training range ``r_f`` (`RulePrototypes.unit`, `feature_ranges`),

    ``D(x) = min_l sum_f |u_f - mu_lf| / r_f``,

"feature ``f`` lies ``|u_f - mu_lf| / r_f`` of its training range from what the nearest rule's
inputs show" (kind ``"prototype"``). Its per-feature terms split it exactly. L1 rather than a
Gaussian because concept vectors are near-binary: a novel class turns some attributes on or off,
and L1 counts those flips where a leaf Gaussian squares a flip by a within-leaf variance that
a few training images set. Ranges rather than standard deviations so that a flip counts 1 whether
the attribute is rare or common (in standard deviations a rare one counts more than twice a
balanced one, and on real concept vectors the rare attributes are the detector's noisiest); chosen
on the KEEL calibration parts (``python scripts/study_typical.py --keel``), where ranges ranked
held-out classes better, as on CUB-50, at a small loss on the synthetic world.

**The ``"typical"`` score** combines it with the leaf Gaussians' ``"leaf"`` score
(`ferl.novelty.scores`) by Fisher's method: each is turned into the negative log of its upper tail
probability among the in-sample scores of (up to `ferl.novelty.scores.REFERENCE_ROWS`) training rows,
``t(s) = -log((1 + #{ref >= s}) / (m + 1))``, and ``typical = t_leaf + t_D`` (nats, ``>= 0``). The
two scores fail on different data: the leaf Gaussians on near-binary concepts whose within-leaf
variances are tiny, the prototypes on small continuous data sets whose leaves hold a handful of
rows. Above the largest reference score ``t`` goes on growing as ``log(1 + (s - max ref) /
lambda)``, ``lambda = max ref - median ref``, so that far-off inputs keep their order. It grows
logarithmically because a linear continuation lets the leaf score's long tail decide alone again
(on the synthetic open world it ranked clearly worse than a cap or this continuation).

Chosen by AUROC (FERL-deep; held-out classes against retained-class test inputs) on three kinds of
data where the two parts fail in turn: the synthetic open world, where the leaf score loses to every
dedicated detector; CUB-50 (frozen EfficientNet-Lite0 concepts), where the prototypes do; and the
14 multiclass KEEL sets, leave-one-class-out on the calibration parts of the tabular benchmark's
folds (never the test folds). ``typical`` matches or beats the better part on the synthetic world
and CUB-50, gives up a little of ``leaf`` on KEEL and stays above kNN there (``evaluate-openworld
--config configs/openworld/{synthetic,cub50_lite0}.yaml``, ``python scripts/study_typical.py
--keel``; the table, and the version before, in docs/results/novelty.md, "The default score
``typical``"). A third tail, of a local density (the mean L1 distance to the 3 nearest training
inputs; ``--exemplars`` of the study) added a little everywhere but stores every training row in
the model and searches them all per input: left out. `MIN_SUPPORT`: a leaf of one or two rows is
an outlier's own prototype; five rows ranked best on the synthetic world (as did eight). On the
synthetic open world ``typical`` also names the attributes better (`prototype_feature_scores`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from ferl.novelty.discount import fit_discount
from ferl.novelty.leaf_gaussians import LeafGaussians
from ferl.novelty.linalg import standardise
from ferl.novelty.ood_score import kind_score, typical_score, typical_tails
from ferl.tree.firing import Firing

__all__ = ["MIN_SUPPORT", "PROTOTYPE_KINDS", "RulePrototypes", "fit_rule_prototypes", "fit_prototype_support",
           "feature_ranges", "nearest_prototype", "prototype_distance", "prototype_kind", "prototype_terms",
           "prototype_feature_scores"]

#: Soft count of training rows (ungated firing) a leaf needs to be a prototype.
MIN_SUPPORT = 5.0
#: Standardised inputs are clipped to this for the float32 search of the nearest prototype.
F32_MAX = 1e30
#: The OOD kinds this module computes.
PROTOTYPE_KINDS = ("typical", "prototype")


@dataclass(frozen=True)
class RulePrototypes:
    """The prototypes and the reference scores of a fitted tree (module docstring).

    Attributes
    ----------
    index : ndarray of shape (k,), int64
        Rows of `ferl.novelty.leaf_gaussians.LeafGaussians.mean` (leaf positions, increasing) that are
        prototypes; ``k >= 1`` (the best-supported leaf when none reaches `MIN_SUPPORT`).
    reference : ndarray of shape (2, m), float64, finite, each row sorted
        In-sample ``"leaf"`` scores and prototype distances of the reference training rows.
    discount : ndarray of shape (2,), float64
        ``(tau, lambda)`` of the evidence discount (`ferl.novelty.discount.fit_discount`), from the
        cross-fitted ``"typical"`` scores of the reference rows; ``tau >= 0``, ``lambda > 0``.
    unit : ndarray of shape (n_features,), float64 >= 1, finite
        Each feature's training range in standardised units (`feature_ranges`): the prototype
        distance's unit.
    """

    index: np.ndarray
    reference: np.ndarray
    discount: np.ndarray
    unit: np.ndarray

    #: Arrays a saved model stores.
    SAVED_FIELDS = ("index", "reference", "discount", "unit")


def fit_rule_prototypes(leaves: LeafGaussians, fired: Firing, sample_weight: np.ndarray, ends: np.ndarray,
                        U: np.ndarray, lost: np.ndarray, term: np.ndarray,
                        crossfit_term: np.ndarray) -> RulePrototypes:
    """The prototypes, the reference scores and the evidence discount of a fitted tree (module
    docstring), from the reference training rows (`ferl.novelty.scores.reference_rows`).

    The reference rows are read as the model reads new inputs (their gated firing): their
    in-sample ``"leaf"`` score (`ferl.novelty.ood_score.kind_score`) from the routing mass they lose
    and their leaf term ``T``, and the cross-fitted one, that score with its ``T / d`` swapped for
    the cross-fitted one.

    Parameters
    ----------
    leaves : LeafGaussians
    fired : Firing
        Sparse training firings.
    sample_weight : ndarray of shape (n_samples,), float64 >= 0, some > 0
    ends : ndarray of shape (2, n_features), float64
        Each feature's minimum and maximum over the rows of positive weight, standardised
        (`ferl.novelty.linalg.standardise`).
    U : ndarray of shape (m, n_features), float64
        The reference rows, standardised.
    lost, term, crossfit_term : ndarray of shape (m,), float64 >= 0
        The reference rows' routing mass lost to the gates (eq. 8), leaf term ``T`` and cross-fitted
        leaf term (`ferl.novelty.leaf_gaussians.fit_leaf_gaussians`).

    Returns
    -------
    RulePrototypes
    """
    index = fit_prototype_support(leaves, fired, sample_weight)
    unit = _unit(*ends)
    distance = _total(_parts(U / unit, leaves, index, unit)[0])
    d = U.shape[1]
    in_sample = kind_score("leaf", lost, np.zeros(lost.size), term, d)
    cross_fitted = np.maximum(in_sample + (crossfit_term - term) / d, 0.0)
    reference = np.sort(np.stack([in_sample, distance]), axis=1)
    typical = typical_score(reference, cross_fitted, distance)
    return RulePrototypes(index, reference, fit_discount(typical), unit)


def feature_ranges(leaves: LeafGaussians, feature_range: np.ndarray) -> np.ndarray:
    """Each feature's training range in standardised units.

    Parameters
    ----------
    leaves : LeafGaussians
        Its ``center`` and ``scale`` standardise the range (`ferl.novelty.linalg.standardise`).
    feature_range : ndarray of shape (n_features, 2), float64
        Each feature's minimum and maximum over the training rows of positive weight
        (`ferl.FERLClassifier.feature_range_`).

    Returns
    -------
    ndarray of shape (n_features,), float64, finite
        ``max - min`` of the standardised rows (at least 2 for a feature that varies, as a standard
        deviation is at most half the range; finite as the standardised rows are clipped); 1 for a
        constant feature.
    """
    return _unit(*standardise(np.asarray(feature_range).T, leaves.center, leaves.scale))


def _unit(low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """``high - low`` of the standardised range ends (standardising is monotone), 1 where they tie."""
    return np.where(high > low, high - low, 1.0)


def fit_prototype_support(leaves: LeafGaussians, fired: Firing, sample_weight: np.ndarray) -> np.ndarray:
    """Leaf positions that are prototypes: soft count of positive-weight rows ``>= MIN_SUPPORT``.

    Parameters
    ----------
    leaves : LeafGaussians
    fired : Firing
        Sparse training firings (its ungated ``phi0`` is read).
    sample_weight : ndarray of shape (n_samples,), float64 >= 0

    Returns
    -------
    ndarray of shape (k,), int64, ``k >= 1``
        Increasing positions into ``leaves.leaves``; the best-supported leaf alone when no leaf
        reaches `MIN_SUPPORT`.
    """
    positive = np.asarray(sample_weight) > 0
    support = np.empty(leaves.leaves.size)
    for i, node in enumerate(leaves.leaves):
        at = slice(fired.start[node], fired.start[node] + fired.count[node])
        support[i] = fired.phi0[at][positive[fired.rows[at]]].sum()
    index = np.flatnonzero(support >= MIN_SUPPORT)
    return index if index.size else np.array([int(np.argmax(support))], dtype=np.int64)


@njit(cache=True, fastmath={"nsz", "contract"})
def _nearest(U, centres_t, centres, reach, parts):
    """Nearest row of ``centres`` (k, d) in L1 to each row of the standardised inputs ``U``, and the
    float64 parts ``|u_f - centres[j, f]|`` at it (written to ``parts``, n x d). Per row, the sums
    over the prototypes run in float32 in the inner loop (`_accumulate` over ``centres_t``, (d, k),
    vectorised; a loop over the features with an early exit per prototype was slower at
    d = 10 and 112, docs/results/speed.md). The prototypes
    whose float32 sum lies within its error bound of the smallest, ``4 (d + 2) eps32 (sum_f |u_f|
    + reach)`` (``reach`` the largest ``sum_f |mu_lf|``; infinite where a value passed
    `F32_MAX`), are compared in float64: the nearest is exact (first on ties)."""
    n, d, k = U.shape[0], U.shape[1], centres_t.shape[1]
    nearest = np.zeros(n, dtype=np.int64)
    acc = np.empty(k, dtype=np.float32)
    eps = 4.0 * (d + 2) * np.finfo(np.float32).eps
    for i in range(n):
        u = U[i]
        size = reach
        for f in range(d):
            size += abs(u[f]) if abs(u[f]) <= F32_MAX else np.inf
        _accumulate(u, centres_t, acc)
        best = 0
        for j in range(1, k):
            if acc[j] < acc[best]:
                best = j
        nearest[i] = best
        bound, exact, close = acc[best] + eps * size, np.inf, 0
        for j in range(k):
            close += acc[j] <= bound
        for j in range(k if close > 1 else 0):
            if acc[j] <= bound:  # a candidate: compared in float64
                total = 0.0
                for f in range(d):
                    total += abs(u[f] - centres[j, f])
                if total < exact:
                    exact, nearest[i] = total, j
        for f in range(d):
            parts[i, f] = min(abs(u[f] - centres[nearest[i], f]), np.finfo(np.float64).max)
    return nearest


@njit(cache=True, fastmath={"reassoc", "nsz", "contract"})
def _accumulate(u, centres_t, acc):
    acc[:] = 0.0
    for f in range(u.size):
        v = np.float32(min(max(u[f], -F32_MAX), F32_MAX))
        for j in range(acc.size):
            acc[j] += abs(v - centres_t[f, j])


def prototype_distance(X: np.ndarray, leaves: LeafGaussians, prototypes: np.ndarray,
                       unit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature parts of the prototype distance ``D(x)`` and the nearest prototype of each input.

    The search runs in float32 (inputs and means clipped to ``+-F32_MAX`` standard deviations);
    the prototypes it cannot tell from the nearest (within its round-off bound, all of them where
    a value was clipped) are compared in float64, and the parts at the nearest are float64: the
    nearest prototype and ``D`` are those of a float64 search.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features), float64, finite
    leaves : LeafGaussians
    prototypes : ndarray of shape (k,), int64
        `RulePrototypes.index`.
    unit : ndarray of shape (n_features,), float64 > 0
        `RulePrototypes.unit`.

    Returns
    -------
    parts : ndarray of shape (n_samples, n_features), float64 >= 0, finite
        ``|u_f - mu_lf| / unit_f`` at the nearest prototype ``l``, in training ranges (the
        standardised inputs clipped as in `ferl.novelty.linalg.standardise`); rows sum to ``D``.
    nearest : ndarray of shape (n_samples,), int64
        Position into ``prototypes`` of the nearest one (the first on ties).
    """
    U = standardise(X, leaves.center, leaves.scale)
    return _parts(np.divide(U, unit, out=U), leaves, prototypes, unit)


def _parts(V: np.ndarray, leaves: LeafGaussians, prototypes: np.ndarray,
           unit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`prototype_distance` of inputs ``V`` standardised and divided by ``unit``."""
    centres = np.ascontiguousarray(leaves.mean[prototypes] / unit)
    size = np.abs(centres)
    # float32 copies clipped like the inputs (a mean past float32's range would be inf there)
    reach = float(size.sum(axis=1).max()) if size.max() <= F32_MAX else np.inf
    centres_t = np.ascontiguousarray(np.clip(centres.T, -F32_MAX, F32_MAX), dtype=np.float32)
    parts = np.empty(V.shape)
    return parts, _nearest(V, centres_t, centres, reach, parts)


def nearest_prototype(X: np.ndarray, leaves: LeafGaussians, prototypes: np.ndarray,
                      unit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Prototype distance ``D(x)``, ndarray (n_samples,) float64 >= 0 finite, and the nearest
    prototype of each input (`prototype_distance`)."""
    parts, nearest = prototype_distance(X, leaves, prototypes, unit)
    return _total(parts), nearest


def _total(parts: np.ndarray) -> np.ndarray:
    """The prototype distance ``D`` (n,), finite, from its per-feature parts (n, d)."""
    return np.minimum(parts.sum(axis=1), np.finfo(np.float64).max)


def prototype_kind(kind: str, X: np.ndarray, leaves: LeafGaussians, prototypes: RulePrototypes,
                   leaf_score: np.ndarray | None = None) -> np.ndarray:
    """The OOD score of kind ``kind`` (`PROTOTYPE_KINDS`) of validated inputs.

    Parameters
    ----------
    kind : {"typical", "prototype"}
    X : ndarray of shape (n_samples, n_features), float64, finite
    leaves : LeafGaussians
    prototypes : RulePrototypes
    leaf_score : ndarray of shape (n_samples,), optional
        The ``"leaf"`` scores of ``X``; needed by ``"typical"``.

    Returns
    -------
    ndarray of shape (n_samples,), float64 >= 0, finite
        ``D(x)`` (``"prototype"``) or ``t_leaf + t_D`` (``"typical"``), nats.
    """
    distance = nearest_prototype(X, leaves, prototypes.index, prototypes.unit)[0]
    if kind == "prototype":
        return distance
    return typical_score(prototypes.reference, leaf_score, distance)


def prototype_terms(X: np.ndarray, leaves: LeafGaussians, prototypes: RulePrototypes,
                    leaf_score: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature prototype deviations and the two tails of ``"typical"`` (`ferl.novelty.scores.analyse`).

    Returns
    -------
    parts : ndarray of shape (n_samples, n_features), float64 >= 0
        `prototype_distance`: rows sum to ``D(x)``.
    tails : ndarray of shape (n_samples, 2), float64 >= 0
        ``(t_leaf, t_D)``: `tail_nats` of ``leaf_score`` and of ``D(x)``.
    """
    parts = prototype_distance(X, leaves, prototypes.index, prototypes.unit)[0]
    return parts, typical_tails(prototypes.reference, leaf_score, parts.sum(axis=1))


def prototype_feature_scores(kind: str, leaf_parts: np.ndarray, parts: np.ndarray,
                             tails: np.ndarray) -> np.ndarray:
    """A score of `PROTOTYPE_KINDS` split over the features, shape (n_samples, n_features), ``>= 0``.

    ``"prototype"``: ``parts``. ``"typical"``: ``t_leaf`` shared out like the ``"leaf"`` score
    (``leaf_parts``, `ferl.novelty.scores.Novelty.feature_scores`) plus ``t_D`` shared out like ``D``
    (``parts``); rows sum to ``t_leaf + t_D`` (a zero score has zero tail: nothing is lost).
    On the synthetic open world (``evaluate-openworld --config configs/openworld/synthetic.yaml``)
    the ``"typical"`` parts name a held-out image's anomalous attributes (precision@3) better than
    the ``"leaf"`` parts; ``D``'s parts alone did better still, but ``"typical"`` must be split as it
    sums (docs/results/novelty.md).
    """
    if kind == "prototype":
        return parts.copy()
    shares = []
    for whole in (leaf_parts, parts):
        total = whole.sum(axis=1, keepdims=True)
        shares.append(np.divide(whole, total, out=np.zeros_like(whole), where=total > 0))
    return tails[:, :1] * shares[0] + tails[:, 1:] * shares[1]
