"""The novelty discount of the evidence (beyond the paper): by the ``"typical"`` score, at a calibrated
operating point, or source by source by the leaf typicality.

FERL's evidence is blind to near-OOD inputs: a held-out class still fires rules, so its credal set
is often a confident singleton. With ``novelty_discount`` on (`ferl.FERLClassifier`) the combined
evidence of an input is discounted (Shafer's discounting, `ferl.evidence.discount_evidence`) by a
reliability ``r(x)`` that falls with its ``"typical"`` OOD score ``t(x)`` (`ferl.novelty.prototypes`):

    ``r(x) = exp(-delta min(t, tau) / tau - max(0, t - tau) / lambda)``,

``delta`` = `DISCOUNT_SLOPE`, ``tau`` the `DISCOUNT_QUANTILES` [0] quantile and ``tau + lambda
log 2`` the [1] quantile of the *cross-fitted* ``"typical"`` scores of the reference training rows
(`fit_discount`): their leaf term is scored by leaf Gaussians fitted without the row's fold
(`ferl.novelty.leaf_gaussians.fit_leaf_gaussians`), since the in-sample scores flatter the training rows
(on the KEEL calibration parts the in-sample reference shifted the tails markedly and widened the
sets of typical inputs more; docs/results/novelty.md). So ``r >= exp(-delta)`` for
inputs as typical as a fraction [0] of unseen training inputs and ``r = 1/2`` (times
``exp(-delta)``) at the [1] quantile; the input abstains once ``r <= 1 / (1 + m(c*) - m(c) -
m(Theta))`` for its least-massive class ``c`` (`ferl.evidence.discount_evidence`).

One reliability for the whole body of evidence rather than one per source: the typical score is
a property of the input against the whole tree (its nearest prototype need not be a rule it
reaches), and the per-source discount of the leaf typicality (``novelty_discount="rules"``,
`ferl.novelty.discount`) could not reach the abstention targets (docs/results/novelty.md).

The constants (`DISCOUNT_QUANTILES` = (0.9, 0.995), `DISCOUNT_SLOPE` = 0.05) were chosen on the
synthetic open world (``python scripts/bench_openworld_novelty.py ROOT --quantiles Q0,Q1 --slope
DELTA`` on the concept tables of ``evaluate-openworld --config configs/openworld/synthetic.yaml``)
and checked on the calibration parts of the 30 KEEL sets (never their test parts): among the
settings that meet the abstention targets (held-out images at least 40 %, retained test
images at most 5 %, here with a margin), the one whose discounted ignorance ranks held-out images
best. On the KEEL test folds (``scripts/bench_novelty_tabular.py``) accuracy is unchanged by
construction, set coverage and mean set size grow a little, and the discounted ignorance ranks
left-out classes far better than the paper's. The grid, the figures and the setting chosen with
the ``"typical"`` score of before are in docs/results/novelty.md ("The novelty discount").

What it does not reach: the ignorance ranks inputs by ``m(Theta) = 1 - r (1 - m0(Theta))``, and
the paper's ``m0(Theta)`` is as large on many typical inputs (boundaries, weak firings) as on novel
ones, so the discounted ignorance stays below the ``"typical"`` score itself. Only a discount that
moves typical inputs too narrows the gap, and it makes most retained test inputs abstain. For
ranking inputs by novelty use ``ood_score``; the discount makes the credal set and the abstention
react to it.

The calibrated operating point (`point_reliability`, `fit_operating_point`, set by
``FERLClassifier.calibrate_novelty`` on held-out in-distribution inputs) replaces that curve once a
model has one: the reliability reads the model's own score (`ferl.novelty.ood_score.default_kind`) and
falls steeply past the point where a chosen share of the held-out inputs abstains. With learned
weights of evidence the curve above moved no input to abstention; the point sets the abstention
rate a user meets directly (docs/results/novelty.md, "The product's score").

**The per-source discount** (``novelty_discount="rules"``, `source_reliability`, applied by
`ferl.evidence.discount`): leaf ``l`` is a reliable source for ``x`` when its *typicality score*
``s_l(x) = nll_l(x) / d + R_l(x) / 2`` (`leaf_typicality`: the leaf's part of the ``nll`` OOD
score, with half the paper's free-feature residual along its path,
`ferl.novelty.free_gaussians.path_residual`) is no larger than for typical training inputs:
``r_l(x) = exp(-delta min(s_l, tau) / tau - max(0, s_l - tau) / lambda)`` (``delta`` =
`TYPICAL_DISCOUNT`). ``tau`` and ``lambda`` come from the *cross-fitted* scores of the training
inputs (`ferl.novelty.leaf_gaussians.fit_leaf_gaussians`): ``tau`` is their firing-weighted
``RELIABILITY_QUANTILES`` [0] quantile and ``r = 1/2`` at the [1] quantile; an internal node's
reliability is the firing-weighted mean of its leaves'.

``RELIABILITY_QUANTILES`` = (0.9, 0.96) was chosen on the synthetic open world
(``scripts/bench_openworld_novelty.py``, FERL-deep) as the only setting tried that meets both
abstention targets (at least 40 % of held-out images, at most 5 % of retained test images) while
keeping ``r`` near 1 for 90 % of typical inputs; the grid is in docs/results/novelty.md ("The
per-source discount").

With a reliability of 1 below ``tau`` the ignorance of every input under ``tau`` would be the
paper's, blind to novelty, and the discounted ignorance would rank held-out classes far below the
``nll`` score. A gentle slope ``delta`` below ``tau`` (beyond the paper) keeps typical inputs'
masses within ``delta`` of the paper's (``r >= 1 - delta``) and lets the ignorance rank them by
typicality. ``delta`` = `TYPICAL_DISCOUNT` = 0.01 gets most of the ranking gain of the steepest
slope tried while typical masses move by at most ``delta``; steeper slopes rank better but abstain
on more retained inputs. Chosen on the synthetic open world
(``scripts/bench_openworld_novelty.py``) and checked on 30 KEEL sets x 5 folds
(``scripts/bench_novelty_tabular.py``); figures in docs/results/novelty.md ("The per-source
discount").
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from numbers import Real

import numpy as np

from ferl.novelty.free_gaussians import free_gaussians, path_residual
from ferl.novelty.leaf_gaussians import LeafGaussians, leaf_totals
from ferl.novelty.linalg import Z_MAX, standardise
from ferl.tree.firing import Firing
from ferl.tree.fuzzy_tree import FuzzyTree

__all__ = ["DISCOUNT_QUANTILES", "DISCOUNT_SLOPE", "POINT_WIDTH", "TYPICAL_DISCOUNT", "DiscountPointWarning",
           "check_abstain", "discounting", "fit_discount", "fit_operating_point", "leaf_typicality",
           "point_reliability", "reliability", "reliability_curve", "source_reliability",
           "typical_reliability"]

#: Quantiles of the cross-fitted reference ``"typical"`` scores where the reliability starts to fall
#: fast and where it halves (how chosen: module docstring).
DISCOUNT_QUANTILES = (0.9, 0.995)
#: The most the reliability of an input falls below the [0] quantile: ``r >= exp(-delta)`` there.
DISCOUNT_SLOPE = 0.05


def reliability_curve(score: np.ndarray, tau: float, width: float, delta: float) -> np.ndarray:
    """``exp(-delta min(s, tau) / tau - max(0, s - tau) / width)`` of scores ``s >= 0``.

    Parameters
    ----------
    score : ndarray, float64 >= 0
    tau : float >= 0
        Where the fast fall starts (no slow part when 0).
    width : float > 0
        The fast fall's scale: ``r`` halves every ``width log 2`` past ``tau``.
    delta : float in [0, 1)
        The slow fall's depth below ``tau``.

    Returns
    -------
    ndarray of the shape of ``score``, float64 in [0, 1]
        Strictly decreasing in ``s`` when ``delta > 0`` (1 up to ``tau`` when ``delta = 0``); 0 only
        where the exponential underflows, far off the training data.
    """
    slow = delta * np.minimum(score, tau) / tau if tau > 0 else 0.0
    return np.exp(-slow - np.maximum(score - tau, 0.0) / width)


def fit_discount(reference: np.ndarray) -> np.ndarray:
    """``(tau, lambda)`` of the module docstring from cross-fitted reference ``"typical"`` scores.

    Parameters
    ----------
    reference : ndarray of shape (m,), float64 >= 0, ``m >= 1``
        Cross-fitted ``"typical"`` scores of the reference training rows.

    Returns
    -------
    ndarray of shape (2,), float64
        ``tau >= 0`` and ``lambda > 0``.
    """
    q0, q1 = np.quantile(np.asarray(reference, dtype=np.float64), DISCOUNT_QUANTILES)
    return np.array([q0, max(q1 - q0, 1e-6 * max(q0, 1.0)) / np.log(2.0)])


def typical_reliability(score: np.ndarray, discount: np.ndarray) -> np.ndarray:
    """``r(x)`` of the module docstring, same shape as ``score``, float64 in [0, 1].

    Parameters
    ----------
    score : ndarray, float64 >= 0
        ``"typical"`` scores.
    discount : ndarray of shape (2,)
        ``(tau, lambda)`` of `fit_discount` (`ferl.novelty.prototypes.RulePrototypes.discount`).
    """
    return reliability_curve(score, float(discount[0]), float(discount[1]), DISCOUNT_SLOPE)


@contextmanager
def discounting(model, setting=True) -> Iterator:
    """``model`` (a fitted `ferl.FERLClassifier`) with ``novelty_discount=setting`` (default True) inside
    the block, its own setting back after it: the parameter is read at inference, so this is the same
    fitted model.

    Raises
    ------
    AttributeError
        ``model`` has no ``novelty_discount`` parameter.
    """
    if "novelty_discount" not in model.get_params():
        raise AttributeError(f"{type(model).__name__} has no novelty_discount")
    previous = model.novelty_discount
    model.set_params(novelty_discount=setting)
    try:
        yield model
    finally:
        model.set_params(novelty_discount=previous)


class DiscountPointWarning(UserWarning):
    """The discount's operating point cannot meet its abstention budget (`fit_operating_point`)."""


#: How far past ``tau`` the calibrated reliability halves, in standard deviations of the reference
#: scores (`fit_operating_point`): steep, so that the operating point, not the curve's shape, decides
#: which inputs abstain.
POINT_WIDTH = 0.1


def point_reliability(point: np.ndarray, score: np.ndarray) -> np.ndarray:
    """The calibrated discount's reliability ``r(x) = exp(-max(0, s - tau) / width)``.

    Parameters
    ----------
    point : ndarray of shape (2,)
        ``(tau, width)`` of `fit_operating_point`, ``width > 0``, in units of the score.
    score : ndarray of shape (n,), float64, finite
        The model's own OOD score (`ferl.novelty.ood_score.default_kind`: ``joint`` or ``typical``;
        any sign).

    Returns
    -------
    ndarray of shape (n,), float64 in [0, 1]: 1 up to ``tau``, 1/2 at ``tau + width log 2``.
    """
    return np.exp(-np.maximum(np.asarray(score, dtype=np.float64) - point[0], 0.0) / point[1])


def check_abstain(abstain) -> float:
    """``abstain`` as a float when it is a number in [0, 1), else ValueError naming it."""
    if isinstance(abstain, bool) or not isinstance(abstain, Real) or not 0.0 <= abstain < 1.0:
        raise ValueError(f"abstain must be a number in [0, 1), got {abstain!r}")
    return float(abstain)


def fit_operating_point(score: np.ndarray, abstains, abstain: float) -> np.ndarray:
    """The novelty discount's operating point on held-out in-distribution inputs (beyond the paper).

    What a user meets is the operating point, so it is set directly rather than left to the curve: the
    smallest ``tau`` among the reference scores (bisection on their order) at which at most
    ``k = m - ceil((1 - abstain)(m + 1))`` of the ``m`` reference inputs abstain with the discount
    at ``(tau, width)``: the split-conformal count, so that a new input exchangeable with them
    abstains with probability at most ``abstain`` (exactly so where abstention is a threshold on the
    score; the plain share let slightly more than ``abstain`` of CUB-50's retained test images
    abstain, docs/results/novelty.md); ``width`` is `POINT_WIDTH` standard deviations of the
    reference scores. An input past ``tau + width log 2`` (reliability below 1/2) always abstains;
    below ``tau`` the evidence is the paper's.

    Parameters
    ----------
    score : ndarray of shape (m,), float64, finite, ``m >= 1``
        The discount kind's scores of the held-out inputs.
    abstains : callable
        ``abstains(point)`` -> bool ndarray of shape (m,): which inputs abstain with the discount at
        ``point = (tau, width)`` (`point_reliability`); it must only grow as ``tau`` falls.
    abstain : float in [0, 1)
        The largest probability of abstention allowed to a new in-distribution input.

    Returns
    -------
    ndarray of shape (2,), float64
        ``(tau, width)``; ``tau`` is the largest reference score when even that abstains more
        (with a `DiscountPointWarning`: the credal sets alone abstain more often than ``abstain``).

    Raises
    ------
    ValueError
        ``abstain`` outside [0, 1), an empty or non-finite ``score``.
    """
    check_abstain(abstain)
    score = np.asarray(score, dtype=np.float64)
    if score.ndim != 1 or score.size == 0 or not np.all(np.isfinite(score)):
        raise ValueError("fit_operating_point needs a non-empty 1-d array of finite scores")
    width = max(POINT_WIDTH * float(score.std()), 1e-9 * max(float(np.abs(score).max()), 1.0))
    ordered = np.sort(score)
    m = ordered.size
    budget = max(m - int(np.ceil((1.0 - abstain) * (m + 1) - 1e-9)), 0)
    lo, hi = 0, m - 1  # the answer's index: abstention at ordered[hi] is within budget
    if (excess := int(np.sum(abstains(np.array([ordered[hi], width]))))) > budget:
        warnings.warn(f"{excess} of the {m} held-out inputs abstain even where the discount leaves them "
                      f"untouched, more than the {budget} that abstain={abstain:.6g} allows: the credal sets "
                      "themselves abstain that often, and the discount adds no abstention",
                      DiscountPointWarning, stacklevel=3)
        return np.array([ordered[hi], width])
    while lo < hi:
        mid = (lo + hi) // 2
        if np.sum(abstains(np.array([ordered[mid], width]))) <= budget:
            hi = mid
        else:
            lo = mid + 1
    return np.array([ordered[hi], width])


#: The most a typical input (typicality score at most ``tau``) is discounted: ``r >= 1 - delta``.
TYPICAL_DISCOUNT = 0.01


def reliability(model: LeafGaussians, score: np.ndarray) -> np.ndarray:
    """``r_l(x) = exp(-delta min(s_l, tau) / tau - max(0, s_l - tau) / lambda)`` of leaf typicality
    scores ``s_l >= 0`` (module docstring; `leaf_typicality`), same shape as ``score``,
    in [0, 1] (0 only where the exponential underflows, far off the training data), ``>= 1 - delta``
    up to ``tau``, strictly decreasing in ``s_l`` (constant 1 up to ``tau`` when ``tau = 0``)."""
    tau, width = model.reliability
    return reliability_curve(score, float(tau), float(width), TYPICAL_DISCOUNT)


def source_reliability(tree: FuzzyTree, model: LeafGaussians, phi0: np.ndarray,
                       score: np.ndarray) -> np.ndarray:
    """Reliability of every node as an evidence source, shape (n, n_nodes), in [0, 1].

    A leaf's is `reliability` of its own typicality score; an internal node's is the ``phi0``-weighted mean
    of the reliabilities of the leaves below it (its firing with the gates off is the sum of
    theirs), i.e. how typical the input is of the region the node covers, at the leaves'
    resolution; 1 where none of them fires.

    Parameters
    ----------
    tree : FuzzyTree
    model : LeafGaussians
    phi0 : ndarray of shape (n, n_nodes)
        Ungated firing of every node.
    score : ndarray of shape (n, L)
        Leaf typicality scores (`leaf_typicality`).
    """
    n = phi0.shape[0]
    num = np.zeros((n, tree.n_nodes))
    den = np.zeros((n, tree.n_nodes))
    num[:, model.leaves] = phi0[:, model.leaves] * reliability(model, score)
    den[:, model.leaves] = phi0[:, model.leaves]
    for o in range(tree.n_nodes - 1, 0, -1):  # children after parents: accumulate bottom-up
        num[:, tree.parent[o]] += num[:, o]
        den[:, tree.parent[o]] += den[:, o]
    out = np.ones((n, tree.n_nodes))
    np.divide(num, den, out=out, where=den > 0)
    return np.clip(out, 0.0, 1.0)


def leaf_typicality(tree: FuzzyTree, leaves: LeafGaussians, X: np.ndarray, firing: Firing,
                    leaf_nll: np.ndarray | None = None) -> np.ndarray:
    """Typicality ``s_l(x) = nll_l(x) / d + R_l(x) / 2`` of every leaf an input reaches (beyond the
    paper; drives the per-source evidence discount): the leaf Gaussian's NLL
    (`ferl.novelty.leaf_gaussians`) and the paper's residual along the leaf's path
    (`ferl.novelty.free_gaussians.path_residual`), i.e. the leaf's part of the ``"nll"`` score (the
    reliability's quantiles and ``delta`` were measured with it).

    Parameters
    ----------
    tree, leaves : a fitted tree with free-feature Gaussians, and its leaf Gaussians
    X : ndarray of shape (n_samples, n_features), float64, finite
    firing : ferl.tree.firing.Firing
        The sparse firings of ``X`` (the ungated ``phi0`` is read).
    leaf_nll : ndarray of shape (n_samples, n_leaves) or None
        ``nll_l(x)`` when already computed (`Novelty.leaf_nll`).

    Returns
    -------
    ndarray of shape (n_samples, n_leaves), float64 >= 0
        ``s_l(x)`` where ``phi0_l(x) > 0``, else 0.
    """
    X = np.ascontiguousarray(X, dtype=np.float64)
    if leaf_nll is None:
        leaf_nll = leaf_totals(leaves, standardise(X, leaves.center, leaves.scale), firing, want_nll=True)[1]
    residual = path_residual(X, firing.start, firing.count, firing.rows, firing.phi0, leaves.leaves,
                             tree.parent, *free_gaussians(tree), Z_MAX)
    return leaf_nll / X.shape[1] + residual / 2
