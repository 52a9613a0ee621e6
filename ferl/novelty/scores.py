"""Novelty of a grown fuzzy tree: its models fitted in one pass (`fit_novelty`), and read out with
every signal split over the features (`analyse`): routing-mass loss, node Gaussians, OOD scores,
attributes.

Paper section 3.1 "Bounded-Support Memberships", eq. 3 and appendix A.2 (eq. 8), extended beyond the
paper by the leaf Gaussians of `ferl.novelty.leaf_gaussians`. Three signals:

* **Geometric novelty.** The bounded-support gates (`ferl.tree.fuzzy_tree.support_gate`) cut the firing of an
  input that leaves the range a node observed in training. The mass lost at internal node ``o`` is
  ``phi_o (1 - gamma_o)`` and ``1 - sum_leaves phi_l = sum_o phi_o (1 - gamma_o)`` exactly (eq. 8);
  summing the per-node terms by split feature names the features responsible (`routing_loss`).
* **Near-OOD, paper eq. 3 (``residual``).** Every node ``o`` fits a diagonal Gaussian
  ``N(mu_o, diag(sigma_o^2))`` over its *free* features (those not tested on its root-to-node path),
  weighted by its training firings. ``z_of(x)^2 = (x_f - mu_of)^2 / sigma_of^2`` tells how atypical
  feature ``f`` is where the tree was not looking (`feature_anomaly`, `residual`).
* **Near-OOD, leaf Gaussians (``leaf`` and ``nll``, beyond the paper).** Every leaf's
  full-covariance Gaussian over all features (`ferl.novelty.leaf_gaussians`): ``T(x) = sum_l phi0_l(x)
  nll_l(x)``, the leaf negative log-likelihood averaged over the rules the input reaches: it sees
  correlations (broken while every feature stays in range) that the diagonal residual cannot.

The residual averages over **all** nodes by the ungated firing ``phi0_o(x)`` (defined far off the
support too): it ranked left-out KEEL classes better than the leaves alone (docs/results/novelty.md).

**The default, ``typical``** (`ferl.novelty.prototypes`): the tails of the ``leaf`` score and of the nearest
rule prototype's distance among the training rows' scores, summed by Fisher's method.

**``leaf``** = ``T(x) / d + LEAF_RESIDUAL R(x) + log(1 + eps) - log(eps + firing(x))``, nats: the leaf
Gaussians' negative log-likelihood per feature, a share of the paper's residual (none by default)
and the negative log of the routing mass reaching the leaves (geometric novelty). The ``R`` weight
of ``leaf`` on its own was chosen by leave-one-class-out on the *calibration* parts of the
tabular benchmark's folds (never the test folds; ``python scripts/bench_novelty.py --datasets
multiclass --seeds 0,1,2,3,4 --studies select``) and on the synthetic open world: 1/4 ranked best on
KEEL, the weights nearly tied on the synthetic world, and CUB-50 preferred none. As a term of the
default ``typical`` it is 0 (`LEAF_RESIDUAL`): ``typical`` ranked better without it on KEEL and
CUB-50 and the same on the synthetic world (``python scripts/study_typical.py --keel``). Without
``R`` the leaf term loses most on correlated pixels (satimage) and on yeast. The ablation kind
``nll`` (``T / d + R / 2``) was weighed the same way; scaling the two terms by their cross-fitted
spreads, or a Gaussian mixture over the leaves, did no better. Figures: docs/results/novelty.md
("The ``leaf`` score and the paper's residual").
**The fit** (`fit_novelty`) hands the training rows from model to model, in the order the data
flows (the read-out follows the same order, `ferl.readout.batch`)::

    training rows, weights, ungated firing
      -> the reference rows (`reference_rows`), read as new inputs are    ferl.tree (gated firing)
      -> free-feature Gaussians of eq. 3, checked; the standardisation;   ferl.novelty.free_gaussians
         the routing mass the reference rows lose
      -> leaf Gaussians on the standardised rows: moments, cross-fitted   ferl.novelty.leaf_gaussians
         NLLs and path residual, reliability, cross-fitted leaf terms     (leaf_fit, cross_fit, linalg)
      -> the reference rows' in-sample leaf term                          ferl.novelty.leaf_gaussians
      -> rule prototypes, the reference rows' distances, their "leaf"     ferl.novelty.prototypes
         and "typical" scores and the discount's (tau, lambda)            (ood_score, discount)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from ferl.novelty.free_gaussians import (
    check_variances,
    fit_free_gaussians,
    free_gaussians,
    free_scores,
    routing_loss,
    standardisation,
)
from ferl.novelty.leaf_gaussians import LeafGaussians, fit_leaf_gaussians, leaf_terms, leaf_totals
from ferl.novelty.linalg import standardise
from ferl.novelty.ood_score import FIRING_EPS, LEAF_TERM_KINDS, OOD_KINDS, RESIDUAL_WEIGHT, SCORE_KINDS
from ferl.novelty.prototypes import (
    PROTOTYPE_KINDS,
    RulePrototypes,
    fit_rule_prototypes,
    prototype_feature_scores,
    prototype_terms,
)
from ferl.tree.firing import Firing
from ferl.tree.fuzzy_tree import FuzzyTree

__all__ = ["DECOMPOSED_KINDS", "NAMING_DEPTH", "REFERENCE_ROWS", "AnomalousFeature", "Novelty", "analyse",
           "fit_novelty", "reference_rows"]

#: Depth of the deepest nodes whose free-feature scores apportion the leaf term of the ``"nll"``
#: score over the features (`Novelty.feature_scores`: how it was chosen).
NAMING_DEPTH = 2
#: At most this many training rows (evenly spaced over the rows of positive weight) give the
#: reference scores of ``"typical"``.
REFERENCE_ROWS = 4096
#: Kinds whose score `Novelty.feature_scores` splits over the features.
DECOMPOSED_KINDS = ("typical", "leaf", "nll", "combined", "residual", "prototype")
class AnomalousFeature(NamedTuple):
    """One ranked attribute of one sample (see `Novelty.ranked`).

    Attributes
    ----------
    name : str
        Feature name.
    score : float
        The feature's part of the default ``typical`` score, in nats, ``>= 0``
        (`Novelty.feature_scores`); the parts of all features sum to the score.
    feature : int
        Column index.
    routing_loss : float
        Firing mass lost at the feature's gates, in [0, 1] (eq. 8).
    deviation : float
        Leaf-Gaussian deviation ``sum_l phi0_l w_lf^2 / 2`` (whitened, `ferl.novelty.leaf_gaussians`), nats.
    anomaly : float
        Free-feature score: firing-weighted mean squared standardised distance (eq. 3).
    """

    name: str
    score: float
    feature: int
    routing_loss: float
    deviation: float
    anomaly: float


@dataclass(frozen=True)
class Novelty:
    """Novelty read-out of a batch of inputs (build it with `analyse`).

    Attributes
    ----------
    routing_loss : ndarray of shape (n_samples, n_features), float64 in [0, 1]
        ``L_f(x) = sum_{internal o splitting on f} phi_o(x) (1 - gamma_o(x))`` (appendix eq. 8):
        the firing mass lost at the gates of feature ``f``; ``sum_f L_f = 1 - firing`` exactly.
        All zero when the gates are off.
    feature_anomaly : ndarray of shape (n_samples, n_features), float64 >= 0
        ``A_f(x) = sum_{o: f free} phi0_o(x) z_of(x)^2 / sum_{o: f free} phi0_o(x)`` over all nodes
        ``o`` where ``f`` is free, ``phi0`` the firing with the gates off and ``z_of`` the
        standardised distance to the node's Gaussian (eq. 3) with the `VAR_FLOOR` floor.
    residual_share : ndarray of shape (n_samples, n_features), float64 >= 0
        Feature ``f``'s part of the residual ``R(x) = sum_o phi0_o(x) r_o(x) / sum_o phi0_o(x)``,
        ``r_o = mean_{f free at o} z_of^2`` (nodes with no free feature are skipped): the
        firing-weighted average over nodes of the per-feature squared diagonal Mahalanobis distance.
    naming_share : ndarray of shape (n_samples, n_features), float64 >= 0
        ``residual_share`` over the nodes at depth ``<=`` `NAMING_DEPTH` only (the nodes fitted on
        most data). It only apportions the leaf term of ``"nll"`` over the features
        (`feature_scores`); no score uses its total.
    deviation, spread : ndarray of shape (n_samples, n_features), float64 >= 0
        The two per-feature halves of the leaf Gaussians' ``T(x)`` (`ferl.novelty.leaf_gaussians.leaf_terms`):
        whitened squared deviation and share of the log-determinant, nats.
    firing : ndarray of shape (n_samples,), float64 in [0, 1]
        Total leaf firing ``sum_l phi_l(x)`` with the gates as configured, computed through eq. 8 as
        ``1 - sum_o phi_o (1 - gamma_o)`` so that it is exactly 1 where no gate is active.
    leaf_nll : ndarray of shape (n_samples, n_leaves), float64 >= 0
        ``nll_l(x)`` of every leaf the input reaches with the gates off (0 elsewhere).
    prototype : ndarray of shape (n_samples, n_features) or (n_samples, 0), float64 >= 0
        ``|u_f - mu_lf|`` at the nearest rule prototype ``l`` (`ferl.novelty.prototypes`; sums to ``D``).
    tails : ndarray of shape (n_samples, 2) or (n_samples, 0), float64 >= 0
        ``(t_leaf, t_D)`` of the ``"typical"`` score (`ferl.novelty.prototypes`).
    """

    routing_loss: np.ndarray
    feature_anomaly: np.ndarray
    residual_share: np.ndarray
    naming_share: np.ndarray
    deviation: np.ndarray
    spread: np.ndarray
    firing: np.ndarray
    leaf_nll: np.ndarray
    prototype: np.ndarray
    tails: np.ndarray

    @property
    def residual(self) -> np.ndarray:
        """``R(x)``, shape (n_samples,), ``>= 0``."""
        return self.residual_share.sum(axis=1)

    def _firing_term(self) -> np.ndarray:
        return np.log1p(FIRING_EPS) - np.log(FIRING_EPS + self.firing)

    def score(self, kind: str = "typical", ignorance: np.ndarray | None = None) -> np.ndarray:
        """OOD score of kind ``kind``, shape (n_samples,); higher means more novel.

        Every kind of `ferl.novelty.ood_score.SCORE_KINDS` but ``"energy"`` (the learned weights'): the
        product's ``"typical"`` and ``"ignorance"`` and the ablation kinds.

        * ``"typical"`` (default): ``t_leaf + t_D`` (`ferl.novelty.prototypes`); ``"prototype"``: ``D(x)``.
        * ``"leaf"``: ``T(x) / d + LEAF_RESIDUAL R(x) + log(1 + eps) - log(eps +
          firing(x))``, eps = `FIRING_EPS`, ``d`` the number of features: the leaf Gaussians'
          negative log-likelihood per feature, a share of the paper's residual (none by default) and
          the negative log of the routing mass reaching the leaves, in nats, ``>= 0`` (how chosen:
          module docstring).
        * ``"nll"``: ``T(x) / d + R(x) / 2 + log(1 + eps) - log(eps + firing(x))`` (an ablation kind).
        * ``"combined"``: ``R(x) / 2 + log(1 + eps) - log(eps + firing(x))`` (an ablation kind).
        * ``"residual"``: ``R(x)``, the paper's residual (eq. 3).
        * ``"firing"``: ``1 - sum_l phi_l(x)``, the routing mass lost to the gates (eq. 8).
        * ``"ignorance"``: ``m(Theta)``, the combined ignorance mass (passed in ``ignorance``).

        Raises
        ------
        ValueError
            Unknown kind, ``"ignorance"`` without ``ignorance``, or a kind of `ferl.novelty.prototypes` of
            a read-out analysed without the prototypes.
        """
        if kind in DECOMPOSED_KINDS:
            return self.feature_scores(kind).sum(axis=1)
        if kind == "firing":
            return self.routing_loss.sum(axis=1)
        if kind == "ignorance":
            if ignorance is None:
                raise ValueError('kind="ignorance" needs the ignorance masses')
            return np.asarray(ignorance, dtype=np.float64).copy()
        raise ValueError(f"unknown OOD score kind {kind!r}; expected one of "
                         f"{[k for k in SCORE_KINDS if k != 'energy']}")

    def feature_scores(self, kind: str = "typical") -> np.ndarray:
        """Score of kind ``kind`` split over the features, shape (n_samples, n_features), ``>= 0``.

        Rows sum to `score` (``kind``) exactly (up to round-off):

        * ``"typical"`` (default), ``"prototype"``: `ferl.novelty.prototypes.prototype_feature_scores`;
        * ``"residual"``: ``residual_share``;
        * ``"combined"``: ``residual_share / 2 + L_f / (1 - firing) * F`` with ``F`` the firing
          term: each feature's share, by its routing loss (eq. 8), of the geometric term (zero
          when no mass is lost);
        * ``"leaf"``: as ``"nll"`` with ``LEAF_RESIDUAL residual_share`` for ``residual_share / 2``;
        * ``"nll"``: the ``"combined"`` parts plus the leaf term ``T / d`` shared out in proportion
          to ``naming_share`` (where it is 0: ``(deviation + spread) / d``). Chosen by precision@3 of
          the top-3 features against each held-out image's anomalous concepts (FERL-deep): shared
          out by the nodes down to `NAMING_DEPTH` it named best on the open world's concept tables
          (within a point of the best on simulated folds); the deep nodes name below chance,
          since a held-out class differs from its neighbours in features split on above them
          (figures in docs/results/novelty.md, "Naming depth").

        Raises
        ------
        ValueError
            ``kind`` not in `DECOMPOSED_KINDS`, or a kind of `ferl.novelty.prototypes` without them.
        """
        if kind not in DECOMPOSED_KINDS:
            raise ValueError(f"feature scores exist for the kinds {list(DECOMPOSED_KINDS)}, not {kind!r}")
        if kind in PROTOTYPE_KINDS:
            if self.tails.shape[1] != 2:
                raise ValueError(f"kind {kind!r} needs the rule prototypes: analyse(..., prototypes)")
            return prototype_feature_scores(kind, self.feature_scores("leaf"), self.prototype, self.tails)
        if kind == "residual":
            return self.residual_share.copy()
        lost = self.routing_loss.sum(axis=1)
        share = np.divide(self.routing_loss, lost[:, None], out=np.zeros_like(self.routing_loss),
                          where=lost[:, None] > 0)
        scores = RESIDUAL_WEIGHT[kind] * self.residual_share + share * self._firing_term()[:, None]
        if kind in LEAF_TERM_KINDS:
            leaf = (self.deviation + self.spread) / self.deviation.shape[1]
            total, naming = leaf.sum(axis=1, keepdims=True), self.naming_share.sum(axis=1, keepdims=True)
            by_naming = np.divide(self.naming_share, naming, out=np.zeros_like(leaf), where=naming > 0)
            scores += np.where(naming > 0, total * by_naming, leaf)
        return scores

    def ranked(self, feature_names, top_k: int | None = 5) -> list[list[AnomalousFeature]]:
        """The ``top_k`` most anomalous features of each sample, by `feature_scores` (the default
        kind, ``"typical"``), highest first.

        Parameters
        ----------
        feature_names : sequence of str, length n_features
        top_k : int >= 1 or None
            Features per sample (clipped to n_features); None lists every feature.

        Returns
        -------
        list of list of AnomalousFeature
            One list per sample; ties keep the column order.

        Raises
        ------
        ValueError
            ``top_k`` < 1 or not an integer.
        """
        d = self.feature_anomaly.shape[1]
        if top_k is None:
            top_k = d
        if isinstance(top_k, bool) or not isinstance(top_k, int | np.integer) or top_k < 1:
            raise ValueError(f"top_k must be a positive integer or None, got {top_k!r}")
        scores = self.feature_scores(OOD_KINDS[0])
        order = np.argsort(-scores, axis=1, kind="stable")[:, : min(int(top_k), d)]
        return [
            [AnomalousFeature(str(feature_names[f]), float(scores[i, f]), int(f),
                              float(self.routing_loss[i, f]), float(self.deviation[i, f]),
                              float(self.feature_anomaly[i, f]))
             for f in row]
            for i, row in enumerate(order)
        ]


def analyse(tree: FuzzyTree, leaves: LeafGaussians, X: np.ndarray, firing: Firing,
            prototypes: RulePrototypes | None = None) -> Novelty:
    """Compute the `Novelty` read-out of validated inputs from their firings.

    Parameters
    ----------
    tree : FuzzyTree
        A fitted tree with free-feature Gaussians (`fit_free_gaussians`).
    leaves : LeafGaussians
        The tree's leaf Gaussians (`ferl.novelty.leaf_gaussians.fit_leaf_gaussians`).
    X : ndarray of shape (n_samples, n_features), float64, finite
    firing : ferl.tree.firing.Firing
        The sparse firings of ``X`` (`FuzzyTree.sparse_firing`), gates as configured: the routing
        loss and the firing use the gated ``phi`` and ``lost``, the Gaussian scores always weight
        nodes by the ungated ``phi0``.
    prototypes : RulePrototypes, optional
        The tree's rule prototypes (`ferl.novelty.prototypes`): without them ``prototype`` and ``tails``
        have no columns, and the kinds of `ferl.novelty.prototypes` raise.

    Returns
    -------
    Novelty

    Raises
    ------
    ValueError
        The tree carries no free-feature Gaussians.
    """
    if tree.free_mean is None or tree.free_var is None:
        raise ValueError("the tree has no free-feature Gaussians; refit the model")
    d = X.shape[1]
    mean, inv_sd, free, n_free = free_gaussians(tree)
    n = firing.n_samples
    X = np.ascontiguousarray(X, dtype=np.float64)
    loss, lost = routing_loss(firing.start, firing.count, firing.rows, firing.lost, tree.feature, n, d)
    shallow = np.asarray(tree.depth) <= NAMING_DEPTH
    anomaly, share, naming = free_scores(X, firing.start, firing.count, firing.rows, firing.phi0, mean,
                                          inv_sd, free, n_free, shallow)
    phi0 = firing.dense(firing.phi0)[:, leaves.leaves]
    deviation, spread, leaf_nll = leaf_terms(leaves, standardise(X, leaves.center, leaves.scale), phi0)
    novelty = Novelty(loss, anomaly, share, naming, deviation, spread, np.maximum(1.0 - lost, 0.0),
                      leaf_nll, np.zeros((n, 0)), np.zeros((n, 0)))
    if prototypes is None:
        return novelty
    parts, tails = prototype_terms(X, leaves, prototypes, novelty.score("leaf"))
    return replace(novelty, prototype=parts, tails=tails)


def reference_rows(sample_weight: np.ndarray) -> np.ndarray:
    """At most `REFERENCE_ROWS` rows of positive weight, evenly spaced (deterministic)."""
    rows = np.flatnonzero(np.asarray(sample_weight) > 0)
    if rows.size <= REFERENCE_ROWS:
        return rows
    return rows[np.linspace(0, rows.size - 1, REFERENCE_ROWS).round().astype(np.int64)]


def fit_novelty(tree: FuzzyTree, X: np.ndarray, sample_weight: np.ndarray, fired: Firing,
                feature_range: np.ndarray, feature_names, gates: bool,
                margin: np.ndarray) -> tuple[LeafGaussians, RulePrototypes]:
    """Fit every novelty model of a grown tree, in the order of the module docstring ("The fit").

    Parameters
    ----------
    tree : FuzzyTree
        The grown, finalised tree; its free-feature Gaussians (eq. 3) are set in place.
    X : ndarray of shape (n_samples, n_features), float64, finite
        The training inputs.
    sample_weight : ndarray of shape (n_samples,), float64 >= 0, some > 0
    fired : Firing
        The ungated sparse training firing of ``X`` (`FuzzyTree.training_firing`).
    feature_range : ndarray of shape (n_features, 2), float64
        Each feature's minimum and maximum over the rows of positive weight.
    feature_names : sequence of str of length n_features
        For the message of a variance float64 cannot hold.
    gates, margin : bool and ndarray of shape (n_nodes,), float64
        The read-out's bounded-support gates and their margins (`FuzzyTree.margins`): the reference
        rows are read as new inputs are.

    Returns
    -------
    LeafGaussians, RulePrototypes

    Raises
    ------
    ValueError
        A feature whose variance float64 cannot hold (`ferl.novelty.free_gaussians.check_variances`)
        or whose spread is too small to standardise (`ferl.novelty.free_gaussians.standardisation`).
    """
    sw = np.asarray(sample_weight, dtype=np.float64)
    n_features = X.shape[1]
    rows = reference_rows(sw)
    path = tree.path_mask(n_features)
    read = tree.sparse_firing(X[rows], gates, margin)  # its ungated phi0 is that of an ungated read
    with np.errstate(over="ignore", invalid="ignore"):
        fit_free_gaussians(tree, X, sw, fired, path)
    check_variances(tree, feature_range, feature_names)
    center, scale = standardisation(X, sw)
    lost = routing_loss(read.start, read.count, read.rows, read.lost, tree.feature, rows.size, n_features)[1]
    # the standardised rows as a temporary: released inside before the leaf reliability's quantiles
    leaves, crossfit_term = fit_leaf_gaussians(tree, standardise(X, center, scale), center, scale, sw, fired,
                                               ~path)
    reference = standardise(X[rows], center, scale)
    ends = standardise(np.asarray(feature_range).T, center, scale)
    term = leaf_totals(leaves, reference, read)[0]
    prototypes = fit_rule_prototypes(leaves, fired, sw, ends, reference, lost, term, crossfit_term[rows])
    return leaves, prototypes
