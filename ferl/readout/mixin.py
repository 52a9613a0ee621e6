"""`ReadoutMixin`: `FERLClassifier`'s read-out methods (evidence, credal set, novelty, OOD score, the
robustness certificate) over `ferl.readout.batch`, for an estimator fitted with ``tree_`` and
``leaf_gaussians_`` that validates its inputs (``_check_X``) and knows its gate margins (``_gate_margin``)."""

from __future__ import annotations

from typing import Self

import numpy as np

from ferl._inputs import feature_domain
from ferl.evidence.algebra import Evidence, discount_evidence
from ferl.evidence.conformal import coverage_set
from ferl.evidence.robustness import weights_radius
from ferl.evidence.weights import rule_sources
from ferl.novelty.discount import check_abstain, discounting, fit_operating_point, point_reliability
from ferl.novelty.ood_score import SCORE_KINDS, check_kind, default_kind, fit_reference, joint_score
from ferl.novelty.scores import AnomalousFeature, Novelty
from ferl.readout.batch import CredalReadout, Readout, discounted, read_out
from ferl.tree import certificate

__all__ = ["ReadoutMixin", "read_score"]


def read_score(model, X, kind: str) -> np.ndarray:
    """The OOD score of any kind the read-out computes, for the product's kinds and the ablations'.

    `FERLClassifier.ood_score` reads the product's kinds (`ferl.novelty.ood_score.OOD_KINDS`) through
    it, `ferl.benchmarks.ood_kinds.ablation_score` the ablation kinds.

    Parameters
    ----------
    model : FERLClassifier
        A fitted model.
    X : array-like of shape (n_samples, n_features_in_)
    kind : str
        One of `ferl.novelty.ood_score.SCORE_KINDS`.

    Returns
    -------
    ndarray of shape (n_samples,), float64, finite
        Higher means more novel.

    Raises
    ------
    ValueError
        ``kind`` not one of `ferl.novelty.ood_score.SCORE_KINDS` (None would mean "no score" to
        `ferl.readout.batch.read_out`), ``"energy"`` for the tree's evidence, or bad ``X``.
    """
    if not isinstance(kind, str) or kind not in SCORE_KINDS:
        raise ValueError(f"unknown OOD score kind {kind!r}; expected one of {list(SCORE_KINDS)}")
    return model._read(model._check_X(X), evidence=False, score=kind).score


class ReadoutMixin:
    """Every output of the read-out comes from one sparse firing pass per call (`ferl.readout.batch`)."""

    def _read(self, X, evidence: bool = True, novelty: bool = False, score: str | None = None,
              typical: bool = True) -> Readout:
        """Evidence, novelty and / or an OOD score of validated ``X`` from one firing pass
        (``typical=False``: without the ``"typical"`` novelty discount)."""
        mode = self._discount_mode()
        point = getattr(self, "discount_point_", None)
        return read_out(self.tree_, self.leaf_gaussians_, X, bool(self.bounded_support),
                        self._gate_margin(), self._sources(), self.combination, evidence, novelty,
                        None if mode in ("typical", "point") and not typical else mode, score,
                        self.rule_prototypes_, self._weights(),
                        None if point is None else (default_kind(self), point),
                        getattr(self, "novelty_reference_", None))

    def _weights(self):
        """The learned weights of evidence and the feature ranges (`ferl.readout.batch.read_out`), or None."""
        weights = getattr(self, "evidence_weights_", None)
        return None if weights is None else (weights, self.feature_range_)

    def _discount_mode(self) -> str | None:
        """`novelty_discount` as `ferl.readout.batch.read_out` takes it: None (off), "typical", "rules"
        or, for True once `calibrate_novelty` has set an operating point, "point"."""
        mode = self.novelty_discount
        if isinstance(mode, str):
            return mode
        if not mode:
            return None
        return "point" if getattr(self, "discount_point_", None) is not None else "typical"

    def _reliability(self, X, fired=None, leaf_nll=None) -> np.ndarray:
        """Source reliabilities (n, n_nodes) of validated ``X`` (`ferl.readout.batch.discounted`), from
        its sparse firings ``fired`` and leaf NLLs when given; all ones unless the discount is "rules"."""
        if self._discount_mode() != "rules":
            return np.ones((X.shape[0], self.tree_.n_nodes))
        if fired is None:
            fired = self.tree_.sparse_firing(X, bool(self.bounded_support), self._gate_margin())
        return discounted(self.tree_, self.leaf_gaussians_, X, fired, leaf_nll)[1]

    def _sources(self) -> np.ndarray:
        # An explicit `evidence_nodes` is read at inference, else the one fixed at fit: a later `variant`
        # must not change what a fitted tree reads out
        tree = self.tree_
        nodes = self.evidence_nodes if self.evidence_nodes is not None else self.evidence_nodes_
        if nodes == "leaves":
            return tree.is_leaf.copy()
        sources = np.ones(tree.n_nodes, dtype=bool)
        sources[0] = False
        return sources

    def evidence(self, X) -> Evidence:
        """Combined Dempster-Shafer evidence for each sample (paper section 3.2).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features_in_)

        Returns
        -------
        Evidence
            ``mass`` (n, C) = belief, ``ignorance`` (n,) = m(Theta), ``conflict`` (n,),
            ``plausibility`` (n, C), ``pignistic`` (n, C), ``credal_set`` (n, C) bool, ``abstain`` (n,).

        Raises
        ------
        ValueError
            NaN / inf in X, or a feature count other than ``n_features_in_``.
        """
        return self._read(self._check_X(X)).evidence

    def predict_proba(self, X) -> np.ndarray:
        """Pignistic probability BetP, ndarray of shape (n_samples, n_classes), rows summing to 1."""
        return self.evidence(X).pignistic

    def predict(self, X) -> np.ndarray:
        """Point label ``argmax_c BetP(c)`` (first class on ties), shape (n_samples,), in ``classes_``.

        Read from the evidence without the ``"typical"`` novelty discount, which keeps the argmax
        only in exact arithmetic (``BetP^r = r BetP + (1 - r) / C``: once ``r`` underflows, far off
        the training data, ``BetP^r`` is uniform), so that label is the same with it on or off.
        """
        proba = self._read(self._check_X(X), typical=False).evidence.pignistic
        return self.classes_[np.argmax(proba, axis=1)]

    def predict_set(self, X, coverage: float | None = None) -> np.ndarray:
        """Credal set S(x), bool ndarray of shape (n_samples, n_classes); a row of all True abstains.

        ``coverage=None``: the paper's interval-dominance set (eq. 4). A coverage in (0, 1): the
        DS-conformal set of appendix F, the classes whose plausibility reaches a threshold
        calibrated on the held-out inputs given to `calibrate_sets`
        (`ferl.evidence.conformal.coverage_set`). With the novelty discount on, the discounted
        plausibility ``r Pl + 1 - r`` only widens these sets. Columns follow ``classes_``.

        Raises
        ------
        ValueError
            Bad ``X``, a coverage outside (0, 1), or a coverage asked of a model never calibrated.
        """
        return self._credal_set(self.evidence(X), coverage)

    def _credal_set(self, ev: Evidence, coverage: float | None) -> np.ndarray:
        if coverage is None:
            return ev.credal_set
        scores = getattr(self, "set_scores_", None)
        if scores is None:
            raise ValueError("predict_set(coverage=...) needs held-out scores: call "
                             "calibrate_sets(X_cal, y_cal) first")
        return coverage_set(ev.plausibility, scores, coverage)

    def calibrate_novelty(self, X, abstain: float = 0.05, coverage: float | None = None) -> Self:
        """Calibrate the novelty read-out on held-out in-distribution inputs (beyond the paper): the
        ``joint`` score's reference and the novelty discount's operating point.

        1. With learned weights of evidence, the ``typical`` and ``energy`` scores of ``X`` give the
           moments that standardise them in the ``joint`` score (`ferl.novelty.ood_score`), which
           becomes the model's own kind (`ferl.novelty.ood_score.default_kind`); stored as
           ``novelty_reference_`` (float64 (4,)).
        2. The novelty discount (``novelty_discount=True``) then reads the model's own kind and
           falls steeply past the point where at most ``abstain`` of ``X`` abstain
           (`ferl.novelty.discount.fit_operating_point`): what a user meets is that operating
           point, and the held-out classes' abstention there is what the score's ranking buys.
           The uncalibrated ``"typical"`` discount (`ferl.novelty.discount`) falls past quantiles
           of the training rows' scores instead; with learned weights the masses are so
           concentrated that it made no held-out CUB-50 image abstain (docs/results/novelty.md).
           Stored as ``discount_point_`` (float64 (2,): ``tau, width``).

        Both are saved with the model; a refit drops them. They are calibrated for the read-out
        settings of the call (``support_margin``, ``min_width``, ``combination``, ...) and, with a
        ``coverage``, for the set scores of `calibrate_sets` (call it first): after changing
        either, call this again. A refused call leaves the model as it was. Returns self.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features_in_), n_samples >= 2
            Inputs of the training classes the model did not see (e.g. the validation split).
        abstain : float in [0, 1), default=0.05
            The largest probability that a new in-distribution input abstains with the discount on.
        coverage : float in (0, 1) or None, default=None
            The credal set whose all-class rows count as abstentions, as in `predict_set`: the
            discounted plausibility ``r Pl + 1 - r`` fills a coverage-targeted set sooner than the
            interval-dominance one (on CUB-50 twice as many test images abstained in it at the
            point calibrated on the latter, docs/results/novelty.md), so calibrate with the set
            that will be read.

        Raises
        ------
        ValueError
            Bad ``X`` or fewer than two rows, ``abstain`` not a number in [0, 1), a ``coverage``
            that `predict_set` refuses, held-out scores without spread (`ferl.novelty.ood_score`).

        Warns
        -----
        UserWarning
            The credal sets themselves abstain on more of ``X`` than ``abstain`` allows.
        """
        check_abstain(abstain)
        X = self._check_X(X)
        if X.shape[0] < 2:
            raise ValueError(f"calibrate_novelty needs at least 2 held-out inputs, got {X.shape[0]}")
        with discounting(self, False):  # the paper's evidence
            base = self._read(X, score="typical")
            self._credal_set(base.evidence, coverage)  # refuse a bad coverage before anything else
            score, reference = base.score, None
            if self._weights() is not None:
                energy = self._read(X, evidence=False, score="energy").score
                reference = fit_reference(base.score, energy)
                score = joint_score(base.score, energy, reference)

        def abstains(point):
            discounted = discount_evidence(base.evidence, point_reliability(point, score))
            return self._credal_set(discounted, coverage).all(axis=1)

        self.discount_point_ = fit_operating_point(score, abstains, abstain)
        self.novelty_reference_ = reference
        return self

    def calibrate_sets(self, X, y) -> Self:
        """Store ``1 - Pl(y)`` of held-out inputs at their true class (``set_scores_``, float64
        (n_cal,), sorted), for `predict_set` with a ``coverage`` (split conformal, paper appendix
        F). Read without the novelty discount. Returns self.

        Raises
        ------
        ValueError
            Bad ``X``, labels of another length or not among ``classes_``.
        """
        X = self._check_X(X)
        y = np.asarray(y)
        if y.shape != (X.shape[0],):
            raise ValueError(f"calibrate_sets: y has shape {y.shape}, expected ({X.shape[0]},)")
        index = np.minimum(np.searchsorted(self.classes_, y), len(self.classes_) - 1)
        if (self.classes_[index] != y).any():
            raise ValueError("calibrate_sets: y holds labels that are not among classes_")
        ev = self._read(X, typical=False).evidence
        self.set_scores_ = np.sort(1.0 - ev.plausibility[np.arange(X.shape[0]), index])
        return self

    def credal_readout(self, X, kind: str | None = None, coverage: float | None = None) -> CredalReadout:
        """The credal set, the evidence and the OOD score of ``X`` from one firing pass.

        Equal to ``predict_set(X)``, ``evidence(X)`` and ``ood_score(X, kind)`` (the same floats),
        at the cost of one read-out instead of three: the inputs are validated once, the nodes
        fired once per chunk of rows (`ferl.readout.batch.CHUNK`), and the score shares the firings
        (and, with `novelty_discount`, the leaf NLLs) of the evidence, so it costs well under the three
        calls. At many rows the nearest-prototype search of the
        ``typical`` score (alone or in ``joint``) adds a large share (rows x prototypes x
        features, float32, vectorised), which ``"energy"`` skips. The read-out is bound by memory
        and suffers more than CART from busy neighbours. Timings against CART's ``predict``
        (``python scripts/bench_scale.py --sections keel,scale``): docs/results/speed.md.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features_in_)
        kind : {"typical", "joint", "energy"} or None, default=None
            The OOD score's kind, one of `ferl.novelty.ood_score.OOD_KINDS` (see `ood_score`); None:
            the model's own, `ferl.novelty.default_kind`.
        coverage : float in (0, 1) or None, default=None
            The credal set's target coverage, as in `predict_set`.

        Returns
        -------
        CredalReadout
            ``credal_set`` (n, C) bool, ``evidence`` (`Evidence`), ``ood_score`` (n,) float64.

        Raises
        ------
        ValueError
            A ``kind`` not of `ferl.novelty.ood_score.OOD_KINDS` (an ablation kind's message names
            `ferl.benchmarks.ood_kinds.ablation_score`), ``"energy"`` for the tree's evidence, NaN /
            inf in X, or a feature count other than ``n_features_in_``.
        """
        out = self._read(self._check_X(X), score=check_kind(default_kind(self) if kind is None else kind))
        return CredalReadout(self._credal_set(out.evidence, coverage), out.evidence, out.score)

    def robustness_radius(self, X, domain=None) -> np.ndarray:
        """Certified l_inf radius: within it (and the domain) the class cannot change, ndarray (n_samples,).

        Tree evidence: the class of ``P_T`` (eq. 9), radius ``Delta(x) / (2 L_T)`` of appendix eq. 12,
        0 where a gate is active or the top class is tied, capped so that the gates stay one
        (`ferl.tree.certificate.robustness_radius`); ``P_T``'s class is not always the class
        `predict` returns (BetP of the combined evidence). Learned weights of evidence (beyond the
        paper): the class `predict` returns, BetP's arg-max (`ferl.evidence.robustness`, the proof
        there); 0 with ``novelty_discount="rules"``, whose per-rule discount it does not bound.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features_in_)
        domain : None, "training", (lo, hi) or array-like of shape (n_features_in_, 2), default=None
            Where the perturbed inputs stay (`ferl._inputs.feature_domain`): None, every real
            value (the paper's); ``"training"``, the training range; ``(0, 1)`` for concept
            probabilities. An observed range that reaches the domain's edge caps nothing there.

        Returns
        -------
        ndarray of shape (n_samples,), float64 >= 0
            Every ``x'`` of the domain within the radius of ``x`` (``||x' - x||_inf`` below it for
            the tree's evidence, at most it for learned weights) gets ``x``'s class; 0: nothing
            certified; ``inf``: no point of the domain changes the class.

        Raises
        ------
        ValueError
            Bad ``X`` or ``domain``.
        """
        X = self._check_X(X)
        return self._radius(X, *self.tree_.firing(X, bool(self.bounded_support), self._gate_margin()), domain)

    def _radius(self, X, phi, lost, domain) -> np.ndarray:
        """`robustness_radius` of validated ``X`` from its dense firing ``phi`` and gate losses ``lost``."""
        bounds, gates = feature_domain(domain, self.feature_range_), bool(self.bounded_support)
        if self.evidence_weights_ is None:
            return certificate.robustness_radius(self.tree_, X, phi, lost, gates, bounds)
        if self._discount_mode() == "rules":
            return np.zeros(X.shape[0])
        sources = rule_sources(X, self.feature_range_, phi[:, self.tree_.is_leaf])
        return weights_radius(self.evidence_weights_, self.tree_, X, sources, self.feature_range_,
                              self._gate_margin(), gates, bounds)

    # ------------------------------------------------------------------ novelty (ferl.novelty.scores)
    def _novelty(self, X) -> Novelty:
        return self._read(X, evidence=False, novelty=True).novelty

    def routing_loss(self, X) -> np.ndarray:
        """Firing mass lost to the gates per sample and split feature (appendix eq. 8).

        Returns ndarray of shape (n_samples, n_features_in_) in [0, 1]; each row sums to
        ``1 - total leaf firing`` (zero with ``bounded_support=False``). See `ferl.novelty.scores.Novelty`.
        """
        return self._novelty(self._check_X(X)).routing_loss

    def feature_anomaly(self, X) -> np.ndarray:
        """Free-feature scores (eq. 3): firing-weighted mean squared standardised distance per
        feature, ndarray of shape (n_samples, n_features_in_), >= 0. See `ferl.novelty.scores.Novelty`."""
        return self._novelty(self._check_X(X)).feature_anomaly

    def ood_score(self, X, kind: str | None = None) -> np.ndarray:
        """OOD score of each sample; higher means more novel.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features_in_)
        kind : {"typical", "joint", "energy"} or None, default=None
            None: the model's own kind, `ferl.novelty.default_kind` (what the product flags,
            discounts and explains with). ``"typical"``: the tails of the leaf Gaussians' score
            (their negative log-likelihood per feature plus ``-log(eps + firing)``) and of the L1
            distance to the nearest rule prototype, in training ranges, among the training rows'
            in-sample scores, summed by Fisher's method (`ferl.novelty.prototypes`; formulas in
            `ferl.novelty.scores.Novelty.score`). ``"energy"``, for a model fitted with
            ``evidence_weights="learned"`` only: ``-log sum_k exp(w_k(x))`` of the weights of
            evidence (`ferl.evidence.weights.evidence_energy`: little evidence for any class).
            ``"joint"``, for such a model after `calibrate_novelty`: ``"typical"`` and
            ``"energy"`` standardised on the held-out inputs and summed (`ferl.novelty.ood_score`).
            The other kinds the read-out computes (the paper's ignorance, residual and firing
            scores, the parts and predecessors of ``"typical"``) are ablations:
            `ferl.benchmarks.ood_kinds.ablation_score` reads them.

        Returns
        -------
        ndarray of shape (n_samples,), float64, finite

        Raises
        ------
        ValueError
            A ``kind`` not of `ferl.novelty.ood_score.OOD_KINDS` (an ablation kind's message names
            `ferl.benchmarks.ood_kinds.ablation_score`), ``"energy"`` or ``"joint"`` for the tree's
            evidence, ``"joint"`` before `calibrate_novelty`, NaN / inf in X, or a feature count
            other than ``n_features_in_``.
        """
        kind = default_kind(self) if kind is None else kind
        return read_score(self, X, check_kind(kind))

    def anomalous_features(self, X, top_k: int | None = 5) -> list[list[AnomalousFeature]]:
        """The ``top_k`` most novel features of each sample, highest score first.

        Returns one list per sample of `ferl.novelty.scores.AnomalousFeature` named tuples
        ``(name, score, feature, routing_loss, deviation, anomaly)``; the scores (nats) are the
        features' parts of the default ``ood_score``, ``"typical"``, and sum to it over all features
        (`ferl.novelty.scores.Novelty.feature_scores`), whatever kind the product flags with.
        ``top_k=None`` lists every feature; ValueError when ``top_k < 1``.
        """
        return self._novelty(self._check_X(X)).ranked(self.feature_names_, top_k)
