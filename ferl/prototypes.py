"""Rule prototypes: how far an input lies from the typical input of its nearest rule (beyond the paper).

Every leaf (rule) ``l`` that holds at least `MIN_SUPPORT` training rows (soft count, ungated
firing) is a *prototype*: its leaf Gaussian's mean ``mu_l`` (`ferl.typicality`, the
firing-weighted training mean in standardised units ``u = (x - center) / scale``). The
**prototype distance** of an input is the L1 distance to the nearest prototype,

    ``D(x) = min_l sum_f |u_f - mu_lf|``,

"feature ``f`` lies ``|u_f - mu_lf|`` training standard deviations from what the nearest rule's
inputs show" (kind ``"prototype"``). Its per-feature terms split it exactly. L1 rather than a
Gaussian because concept vectors are near-binary: a novel class turns some attributes on or off,
and L1 counts those flips where a leaf Gaussian squares a flip by a within-leaf variance that
a few training images set.

**The ``"typical"`` score** combines it with the leaf Gaussians' ``"leaf"`` score
(`ferl.novelty`) by Fisher's method: each is turned into the negative log of its upper tail
probability among the in-sample scores of (up to `REFERENCE_ROWS`) training rows,
``t(s) = -log((1 + #{ref >= s}) / (m + 1))``, and ``typical = t_leaf + t_D`` (nats, ``>= 0``). The
two scores fail on different data: the leaf Gaussians on near-binary concepts whose within-leaf
variances are tiny, the prototypes on small continuous data sets whose leaves hold a handful of
rows. Above the largest reference score ``t`` goes on growing as ``log(1 + (s - max ref) /
lambda)``, ``lambda = max ref - median ref``, so that far-off inputs keep their order. It grows
logarithmically because a linear continuation lets the leaf score's long tail decide alone again:
synthetic open world (11 folds) 93.75 with ``t`` capped at ``log(m + 1)``, 93.58 with this
continuation, 93.29 with ``lambda`` the mean excess over the 0.9-quantile, 91.87 with a linear
``(s - max ref) / lambda`` of that ``lambda``.

Measured by prototype scripts on the stored fold tables before this module (FERL-deep, AUROC, mean
over folds; in-distribution = retained-class test images, novel = held-out-class images):

============================================= ======= ========= ====== ======= ===========
data                                          leaf    prototype typical  kNN    best detector
============================================= ======= ========= ====== ======= ===========
synthetic open world, 11 folds                90.36   93.47     93.75   91.20  IForest 93.32
14 multiclass KEEL, calibration parts (LOCO)  83.44   76.70     82.54   80.45  kNN 80.45
============================================= ======= ========= ====== ======= ===========

`MIN_SUPPORT` by the same runs (synthetic, ``typical``): 2 / 3 / 5 / 8 rows give 92.43 / 92.73 /
93.75 / 93.83; a leaf of one or two rows is an outlier's own prototype.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from ferl._firing import Firing
from ferl.typicality import LeafGaussians, standardise

__all__ = ["MIN_SUPPORT", "REFERENCE_ROWS", "PROTOTYPE_KINDS", "RulePrototypes", "fit_rule_prototypes",
           "fit_prototype_support", "nearest_prototype", "prototype_distance", "prototype_kind",
           "tail_nats", "reference_rows"]

#: Soft count of training rows (ungated firing) a leaf needs to be a prototype.
MIN_SUPPORT = 5.0
#: At most this many training rows (evenly spaced over the rows of positive weight) give the
#: reference scores of ``"typical"``.
REFERENCE_ROWS = 4096
#: The OOD kinds this module computes.
PROTOTYPE_KINDS = ("typical", "prototype")


@dataclass(frozen=True)
class RulePrototypes:
    """The prototypes and the reference scores of a fitted tree (module docstring).

    Attributes
    ----------
    index : ndarray of shape (k,), int64
        Rows of `ferl.typicality.LeafGaussians.mean` (leaf positions, increasing) that are
        prototypes; ``k >= 1`` (the best-supported leaf when none reaches `MIN_SUPPORT`).
    reference : ndarray of shape (2, m), float64, finite, each row sorted
        In-sample ``"leaf"`` scores and prototype distances of the reference training rows.
    """

    index: np.ndarray
    reference: np.ndarray

    #: Arrays a saved model stores.
    SAVED_FIELDS = ("index", "reference")


def fit_rule_prototypes(leaves: LeafGaussians, fired: Firing, X: np.ndarray, sample_weight: np.ndarray,
                        leaf_score) -> RulePrototypes:
    """The prototypes and reference scores of a fitted tree (module docstring).

    Parameters
    ----------
    leaves : LeafGaussians
    fired : Firing
        Sparse training firings of ``X``.
    X : ndarray of shape (n_samples, n_features), float64, finite
        The training inputs.
    sample_weight : ndarray of shape (n_samples,), float64 >= 0, some > 0
    leaf_score : callable
        ``leaf_score(X_rows)``: the fitted model's ``"leaf"`` OOD scores of some training rows.

    Returns
    -------
    RulePrototypes
    """
    index = fit_prototype_support(leaves, fired, sample_weight)
    rows = reference_rows(sample_weight)
    reference = np.stack([leaf_score(X[rows]), nearest_prototype(X[rows], leaves, index)[0]])
    return RulePrototypes(index, np.sort(reference, axis=1))


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


@njit(cache=True)
def _nearest(U, centres):
    n, k = U.shape[0], centres.shape[0]
    best = np.empty(n)
    arg = np.zeros(n, dtype=np.int64)
    for i in range(n):
        b = np.inf
        for j in range(k):
            s = 0.0
            for f in range(U.shape[1]):
                s += abs(U[i, f] - centres[j, f])
                if s >= b:  # partial distance: this prototype cannot be the nearest
                    break
            if s < b:
                b = s
                arg[i] = j
        best[i] = b
    return best, arg


def nearest_prototype(X: np.ndarray, leaves: LeafGaussians,
                      prototypes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Prototype distance ``D(x)`` and the nearest prototype of each input.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features), float64, finite
    leaves : LeafGaussians
    prototypes : ndarray of shape (k,), int64
        `RulePrototypes.index`.

    Returns
    -------
    distance : ndarray of shape (n_samples,), float64 >= 0, finite
        L1 distance in training standard deviations (the standardised inputs are clipped as in
        `ferl.typicality.standardise`).
    nearest : ndarray of shape (n_samples,), int64
        Position into ``prototypes`` of the nearest one (the first on ties).
    """
    U = np.ascontiguousarray(standardise(X, leaves.center, leaves.scale))
    centres = np.ascontiguousarray(leaves.mean[prototypes])
    with np.errstate(over="ignore"):
        distance, nearest = _nearest(U, centres)
    return np.minimum(distance, np.finfo(np.float64).max), nearest


def prototype_distance(X: np.ndarray, leaves: LeafGaussians, prototypes: np.ndarray) -> np.ndarray:
    """Per-feature parts ``|u_f - mu_lf|`` of ``D(x)`` at the nearest prototype ``l``.

    Returns
    -------
    ndarray of shape (n_samples, n_features), float64 >= 0
        Rows sum to `nearest_prototype`'s distance (up to round-off).
    """
    _, nearest = nearest_prototype(X, leaves, prototypes)
    U = standardise(X, leaves.center, leaves.scale)
    with np.errstate(over="ignore"):
        return np.minimum(np.abs(U - leaves.mean[prototypes][nearest]), np.finfo(np.float64).max)


def reference_rows(sample_weight: np.ndarray) -> np.ndarray:
    """At most `REFERENCE_ROWS` rows of positive weight, evenly spaced (deterministic)."""
    rows = np.flatnonzero(np.asarray(sample_weight) > 0)
    if rows.size <= REFERENCE_ROWS:
        return rows
    return rows[np.linspace(0, rows.size - 1, REFERENCE_ROWS).round().astype(np.int64)]


def tail_nats(reference: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """``t(s)`` of the module docstring: the negative log upper-tail probability of ``scores``.

    Parameters
    ----------
    reference : ndarray of shape (m,), float64, sorted, finite, ``m >= 1``
    scores : ndarray of shape (n,), float64

    Returns
    -------
    ndarray of shape (n,), float64 >= 0, finite for finite scores
        ``-log((1 + #{ref >= s}) / (m + 1))``, plus ``log(1 + (s - ref[-1]) / lambda)`` above the
        largest reference score (``lambda = ref[-1] - median(ref)``; 1 when that is 0).
    """
    m = reference.size
    ge = m - np.searchsorted(reference, scores, side="left")
    nats = np.log(m + 1.0) - np.log1p(ge)
    lam = float(reference[-1] - np.median(reference)) or 1.0
    beyond = scores > reference[-1]
    with np.errstate(over="ignore"):
        nats[beyond] += np.log1p(np.minimum((scores[beyond] - reference[-1]) / lam, np.finfo(np.float64).max))
    return np.minimum(nats, np.finfo(np.float64).max)


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
    distance = nearest_prototype(X, leaves, prototypes.index)[0]
    if kind == "prototype":
        return distance
    leaf_ref, distance_ref = prototypes.reference
    return np.minimum(tail_nats(leaf_ref, leaf_score) + tail_nats(distance_ref, distance),
                      np.finfo(np.float64).max)
