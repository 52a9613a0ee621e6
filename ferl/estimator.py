"""`FERLClassifier`: the scikit-learn estimator over the fuzzy tree, builder and evidence modules;
its rule interface comes from `ferl._rules_mixin`, its read-out (evidence, credal set, novelty, OOD
score) from `ferl.readout.mixin`, its ``save`` / ``load`` from `ferl.io.model_files`."""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from ferl._inputs import (
    check_sample_weight,
    one_sample,
    rescale_weights,
    resolve_feature_names,
    seed_from,
    str_columns,
)
from ferl._params import check_params
from ferl._rules_mixin import RulesMixin
from ferl.evidence.weights import fit_evidence_weights, rule_sources
from ferl.explain import Explanation, build_explanation
from ferl.io.model_files import ModelFilesMixin
from ferl.novelty.discount import point_reliability, typical_reliability
from ferl.novelty.linalg import one_blas_thread
from ferl.novelty.ood_score import check_kind, default_kind
from ferl.novelty.scores import analyse, fit_novelty
from ferl.presets import PARAMETER_CONSTRAINTS, PRESETS, growth_settings, preset_setting
from ferl.readout.mixin import ReadoutMixin
from ferl.rules import fires_alone
from ferl.tree.builder import grow_tree
from ferl.tree.partitions import fixed_partitions

__all__ = ["FERLClassifier", "PRESETS"]

#: The parameters the read-out reads (they may be set after fit, so the read-out checks them too).
READ_PARAMS = ("bounded_support", "support_margin", "min_width", "novelty_discount", "evidence_nodes",
               "combination")

class FERLClassifier(RulesMixin, ReadoutMixin, ModelFilesMixin, ClassifierMixin, BaseEstimator):
    """Fast Evidential Rule Learning: a fuzzy rule tree with a Dempster-Shafer read-out.

    Every split is a complementary fuzzy pair (paper section 3.1): a learned ramp ``x_f <= theta +- h``
    whose ``theta`` is the median of B bootstrap Gini-optimal cuts and ``h = width_factor * MAD``
    (eq. 1-2), or a fixed low / medium / high quantile set (compact variant). Each node is a mass
    ``m_o({c}) = phi_o p_o(c)``, ``m_o(Theta) = 1 - phi_o``; combining the masses of the evidence
    nodes (section 3.2, eq. 4) gives belief, plausibility, ignorance, the pignistic probability
    (``predict_proba``) and the interval-dominance credal set (``predict_set``). The same pass gives
    novelty (section 3.1, appendix A.2, `ferl.novelty.scores`, `ferl.novelty.leaf_gaussians`, and beyond the
    paper the
    rule prototypes of `ferl.novelty.prototypes` behind the default ``ood_score``: ``routing_loss``,
    ``feature_anomaly``, ``ood_score``, ``anomalous_features``), rules and explanations (``rules_``,
    ``export_text``, ``explain``) and a robustness certificate (appendix A.3 and, for learned weights of
    evidence, beyond the paper: ``robustness_radius``).

    Parameters
    ----------
    variant : {"compact", "medium", "deep"}, default="deep"
        Preset of the paper's configurations (see `ferl.presets`, which says what the paper leaves
        open and what was chosen, by which measurement): compact (<= 15 rules, learned splits,
        cost-complexity pruned; ``partition="fixed"`` gives the paper's low / medium / high
        terms), medium (<= 50 rules, learned splits), deep (<= 200 rules, learned splits; the main
        text's 200 rather than appendix G's 150); medium and deep grow at least
        ``rules_per_class`` rules per class. Any parameter below that is not None overrides
        the preset.
    max_rules : int >= 2, default=None
        Rule budget R (number of leaves). When given it is exact; when None the preset's budget is
        raised to ``rules_per_class * n_classes`` where that is larger.
    rules_per_class : float >= 0, default=None
        Minimum rules per class of the preset's budget (ignored when `max_rules` is given).
    max_depth : int >= 1, default=None
        Maximum depth D.
    partition : {"learned", "fixed"}, default=None
        Bootstrapped learned splits, or fixed low / medium / high partitions.
    gain : {"entropy", "gini", "cci"}, default=None
        Information gain, weighted Gini impurity decrease (the paper's WGI) or Complete
        Classification Index, each weighted by the node's soft support.
    evidence_nodes : {"leaves", "all"}, default=None
        Evidence sources: active leaves, or every active non-root node. Read at inference when
        given; when None, the preset's choice as resolved at fit time (``evidence_nodes_``).
    combination : {"dempster", "cautious"}, default="dempster"
        Dempster's rule (eq. 4) or Denoeux's cautious rule (eq. 13). Read at inference.
    evidence_weights : {"tree", "learned"}, default="tree"
        ``"tree"``: each fired node is the paper's mass ``phi_o p_o`` (section 3.2). ``"learned"``
        (beyond the paper): the fired leaves and one "x_f is high" rule per feature are sources
        whose weights of evidence are fitted by penalised log loss, combined by Dempster's rule
        (Denœux 2019; `ferl.evidence.weights`): calibrated beliefs that pool every concept, as a
        logistic regression does, with the tree's rules as extra sources. Fixed at fit;
        ``combination`` and ``evidence_nodes`` then do not apply.
    n_bootstrap : int >= 1, default=25
        Bootstrap resamples B for learned splits.
    width_factor : float > 0, default=2.0
        gamma of eq. 2 (half-width ``h = gamma * MAD`` of the bootstrap cuts). The paper gives no
        value; 2 keeps the deep variant's accuracy while giving a non-degenerate ignorance on
        wine, pima, banana, segment and vowel (1 made sets almost always singletons).
    min_width : float > 0, default=0.05
        Minimum half-width of a learned split as a fraction of the spread between the feature's
        1st and 99th training percentiles (its range when they tie): guards ``h = 0`` when every
        resample finds the same cut. ``min_width`` times the feature's range also floors the
        support-gate margin. The paper gives no value; `ferl.presets` says how 0.05 was chosen.
    min_gain : float >= 0, default=None
        Minimum gain delta; splits at or below it count against `patience`.
    patience : int >= 0, default=None
        Non-improving splits tolerated before growth stops.
    prune : bool, default=None
        After growth, undo splits by minimal cost-complexity pruning at `ccp_alpha`
        (`ferl.tree.pruning.cost_complexity_prune`; at 0 only the splits that change no training
        prediction).
    ccp_alpha : float >= 0, default=None
        Complexity cost of one rule when pruning, in fractions of the training weight: a subtree
        is undone when it saves at most ``ccp_alpha`` soft training error per rule it adds.
        Given while pruning is off (`prune` False, or None with a preset that does not prune) it
        raises ValueError at fit rather than being ignored.
    min_samples_leaf : int >= 1 or float in (0, 1), default=None
        Minimum soft support of each child: a count of (mean-weight) samples, or a fraction of the
        total weight.
    bounded_support : bool, default=True
        Apply the bounded-support gates at inference (section 3.1, appendix C.2).
    support_margin : float > 0, default=1.0
        Gate margin as a multiple of the node-local observed range (the paper's default is 1).
    novelty_discount : bool or {"typical", "rules"}, default=False
        Discount the evidence by how typical the input is (beyond the paper), so that near-OOD
        inputs, which still fire rules, get ignorance, wider credal sets and abstentions. Read at
        inference; False keeps the paper's read-out bit for bit. True or ``"typical"``: the
        combined evidence, by a reliability ``r(x)`` that falls with the ``"typical"`` OOD score
        past its 0.9 quantile on cross-fitted training rows (`ferl.novelty.discount`), or, once
        `calibrate_novelty` has set an operating point, by one that falls past that point on the
        model's own score (``True`` only; the abstention rate of held-out inputs is then the one
        asked for); ``BetP``'s argmax, hence ``predict``, is unchanged. ``"rules"``: every source's firing
        ``phi_o`` by its own leaf typicality ``r_o(x)`` (`ferl.novelty.discount`). On the
        synthetic open world (``scripts/bench_openworld_novelty.py``) ``"typical"`` makes many
        more held-out images abstain while retained test images stay under the 5 % target,
        and the ignorance ranks held-out images far better than the paper's (still below the
        ``"typical"`` score itself); ``"rules"`` reaches less. On the KEEL sets
        (``scripts/bench_novelty_tabular.py``) set coverage and set size grow a little. Figures in
        docs/results/novelty.md. **Not for inputs shifted as a whole from the training ones**:
        under such a shift every input looks atypical and abstains (with ``"rules"`` a FERL-deep
        fitted on CUB-50's true concepts and applied to a detector's concepts lost nearly all its
        accuracy; docs/results/concept-heads.md), so the CBM heads keep it off
        (`cbm.heads.FERLHead`).
    random_state : int, RandomState instance or None, default=None
        Seeds the bootstrap resamples.

    Attributes
    ----------
    tree_ : FuzzyTree
        The flat-array tree, with the free-feature Gaussians of eq. 3 (`ferl.novelty.free_gaussians`).
    classes_ : ndarray of shape (n_classes,)
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Only when X has string column names (scikit-learn convention; ``numpy.str_`` labels count
        as strings and are stored as ``str``, so a frame's columns are checked by name).
    feature_names_ : list of str
        Names used in rules: ``feature_names_in_``, the ``feature_names`` given to `fit`, or x0, x1...
    n_rules_ : int
        Number of leaves.
    evidence_nodes_ : {"leaves", "all"}
        The evidence sources resolved at fit time (the preset's unless `evidence_nodes` was given);
        the read-out uses them while `evidence_nodes` is None, whatever `variant` says later.
    rule_alone_ : ndarray of shape (n_rules_,) or None
        Share of the training weight on which each rule holds more than half the firing
        (`ferl.rules.fires_alone`); None for a model saved before it was recorded.
    leaf_gaussians_ : LeafGaussians
        The leaves' full-covariance Gaussians (`ferl.novelty.leaf_gaussians`).
    rule_prototypes_ : RulePrototypes
        The supported leaves whose means are prototypes, and the training rows' reference scores
        of the default ``"typical"`` OOD score (`ferl.novelty.prototypes`).
    evidence_weights_ : EvidenceWeights or None
        The learned weights of evidence (``evidence_weights="learned"``), else None.
    set_scores_ : ndarray of shape (n_cal,) or None
        Held-out ``1 - Pl(y)`` of `calibrate_sets`, else None.
    discount_point_ : ndarray of shape (2,) or None
        The novelty discount's operating point ``(tau, width)`` of `calibrate_novelty`, else None.
    novelty_reference_ : ndarray of shape (4,) or None
        The ``"joint"`` score's held-out moments (`calibrate_novelty`, learned weights), else None.
    """

    def __init__(self, variant="deep", *, max_rules=None, rules_per_class=None, max_depth=None,
                 partition=None, gain=None, evidence_nodes=None, combination="dempster",
                 evidence_weights="tree",
                 n_bootstrap=25, width_factor=2.0, min_width=0.05, min_gain=None, patience=None,
                 min_samples_leaf=None, prune=None, ccp_alpha=None, bounded_support=True, support_margin=1.0,
                 novelty_discount=False, random_state=None):
        self.variant = variant
        self.max_rules = max_rules
        self.rules_per_class = rules_per_class
        self.max_depth = max_depth
        self.partition = partition
        self.gain = gain
        self.evidence_nodes = evidence_nodes
        self.combination = combination
        self.evidence_weights = evidence_weights
        self.n_bootstrap = n_bootstrap
        self.width_factor = width_factor
        self.min_width = min_width
        self.min_gain = min_gain
        self.patience = patience
        self.min_samples_leaf = min_samples_leaf
        self.prune = prune
        self.ccp_alpha = ccp_alpha
        self.bounded_support = bounded_support
        self.support_margin = support_margin
        self.novelty_discount = novelty_discount
        self.random_state = random_state

    # ------------------------------------------------------------------ fit
    def fit(self, X, y, sample_weight=None, feature_names=None):
        """Grow the fuzzy tree (paper algorithm 1).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Finite numeric features (any scale; concept probabilities in [0, 1] for a CBM head).
        y : array-like of shape (n_samples,)
            Class labels of any hashable type (strings round-trip).
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weights; None means all ones.
        feature_names : sequence of str of length n_features, default=None
            Names for rules and explanations when X carries none.

        Returns
        -------
        self

        Raises
        ------
        ValueError
            A parameter outside its constraints (`ferl.presets.PARAMETER_CONSTRAINTS`; the message
            names it), `ccp_alpha` given while pruning is off, NaN or inf in X, empty X, labels of
            another length than X, `sample_weight` of the wrong shape, negative, non-finite or all
            zero, fewer than two classes (with positive weight, also relative to the largest
            weight in float64), `feature_names` of the wrong
            length, a non-constant feature whose variance
            overflows float64 or lies below `ferl.novelty.free_gaussians.MIN_VARIANCE` (the message names it;
            rescale X).
        """
        check_params(self, PARAMETER_CONSTRAINTS)
        X, y = validate_data(self, str_columns(X), y, dtype=np.float64, ensure_all_finite=True)
        check_classification_targets(y)
        sw = check_sample_weight(sample_weight, X.shape[0])
        self.classes_, y_enc = np.unique(y, return_inverse=True)
        n_classes = len(self.classes_)
        weighted = np.unique(y_enc[sw > 0])
        if n_classes < 2 or len(weighted) < 2:
            raise ValueError(
                f"FERLClassifier needs at least two classes in y with positive weight; got "
                f"{len(weighted)} class(es): {self.classes_[weighted].tolist()}"
            )
        sw, unit = rescale_weights(sw)  # only relative weights matter
        if len(kept := np.unique(y_enc[sw > 0])) < 2:
            raise ValueError(
                f"sample_weight spans more than float64 holds: relative to the largest weight, every "
                f"weight of class(es) {self.classes_[np.setdiff1d(weighted, kept)].tolist()} underflows "
                f"to 0; give weights within a ratio of about 1e300"
            )
        self.feature_names_ = resolve_feature_names(self, feature_names, X.shape[1])
        positive = sw > 0
        rows = positive[:, None]  # the range of the positive-weight rows, without copying them
        self.feature_range_ = np.stack([X.min(axis=0, where=rows, initial=np.inf),
                                        X.max(axis=0, where=rows, initial=-np.inf)], axis=1)
        settings = growth_settings(self, len(kept), float(sw.sum()), int(positive.sum()))
        sets = fixed_partitions(X, sw) if settings.partition == "fixed" else None
        self.partitions_ = sets
        rng = np.random.default_rng(seed_from(self.random_state))
        self.tree_ = grow_tree(X, y_enc.astype(np.int64, copy=False), sw, n_classes, settings, rng, sets)
        self.tree_.weight = self.tree_.weight * unit
        # one slim ungated pass feeds the novelty models, the rule shares and the learned weights (the
        # gates are 1 on the rows of positive weight)
        fired = self.tree_.training_firing(X)
        self.leaf_gaussians_, self.rule_prototypes_ = fit_novelty(
            self.tree_, X, sw, fired, self.feature_range_, self.feature_names_, bool(self.bounded_support),
            self._gate_margin())
        self.n_rules_ = int(self.tree_.is_leaf.sum())
        self.evidence_nodes_ = preset_setting(self, "evidence_nodes")
        self.rule_alone_ = fires_alone(fired, sw, self.tree_.is_leaf)
        self.evidence_weights_ = None
        # a refit drops the calibrations of the last fit
        self.set_scores_ = self.discount_point_ = self.novelty_reference_ = None
        if self.evidence_weights == "learned":
            leaf_phi = fired.dense(fired.phi, self.tree_.is_leaf)
            with one_blas_thread():  # lbfgs on a few 10^4 weights: threads only contend
                self.evidence_weights_ = fit_evidence_weights(
                    rule_sources(X, self.feature_range_, leaf_phi), y_enc, sw, n_classes)
        return self

    # ------------------------------------------------------------------ inference
    def _check_X(self, X):
        check_is_fitted(self, "tree_")
        # the parameters read at inference may be set after fit: checked when they change (by type
        # too: ``1 == True``, but only True is a bool)
        params = tuple((type(v), v) for v in (getattr(self, n) for n in READ_PARAMS))
        self.tree_.derived("read_params", params,
                           lambda: check_params(self, PARAMETER_CONSTRAINTS, READ_PARAMS))
        if (type(X) is np.ndarray and X.dtype == np.float64 and X.ndim == 2 and X.shape[0] > 0
                and X.shape[1] == self.n_features_in_ and not hasattr(self, "feature_names_in_")):
            with np.errstate(over="ignore", invalid="ignore"):  # large finite inputs: inf, or inf - inf
                if np.isfinite(X.sum()) or np.isfinite(X).all():
                    return X  # what validate_data returns for such an X, without its fixed cost
        return validate_data(self, str_columns(X), reset=False, dtype=np.float64, ensure_all_finite=True)

    def _gate_margin(self) -> np.ndarray:
        return self.tree_.margins(self.support_margin, self.min_width, self.feature_range_)

    def _firing(self, X):
        """Dense firing ``phi`` (n, n_nodes) and gate losses (n, n_nodes) of validated ``X``."""
        return self.tree_.firing(X, bool(self.bounded_support), self._gate_margin())

    def node_firing(self, X) -> np.ndarray:
        """Firing ``phi_o(x)`` of every node after the gates (root = 1), ndarray of shape
        (n_samples, n_nodes) in [0, 1]. A split can change the evidence of ``x`` only where its node
        fires (``phi > 0``): the class masses of section 3.2 rest on the features of those nodes only."""
        return self.tree_.firing(self._check_X(X), bool(self.bounded_support), self._gate_margin())[0]

    def explain(self, x, top_k: int | None = 5, kind: str | None = None, domain=None) -> Explanation:
        """Explain the decision for one sample: fired rules with firings and masses, belief,
        plausibility, ignorance, credal set, anomalous attributes, OOD score, robustness radius.

        Parameters
        ----------
        x : array-like of shape (n_features_in_,) or (1, n_features_in_)
            One sample.
        top_k : int >= 1 or None, default=5
            Anomalous attributes listed (`anomalous_features`).
        kind : {"typical", "joint", "energy"} or None, default=None
            The OOD score's kind (`ood_score`); None: the one the product flags with,
            `ferl.novelty.default_kind`. The explanation names it (``ood_kind``).
        domain : None, "training", (lo, hi) or array-like of shape (n_features_in_, 2), default=None
            The certified radius's domain, as in `robustness_radius`.

        Returns
        -------
        Explanation
            ``to_markdown()``, ``to_json()``.

        Raises
        ------
        ValueError
            Several rows, bad ``x`` or ``domain``, or a ``kind`` not of `ferl.novelty.ood_score.OOD_KINDS`.
        """
        kind = default_kind(self) if kind is None else check_kind(kind)
        X = self._check_X(one_sample(x))
        fired = self.tree_.sparse_firing(X, bool(self.bounded_support), self._gate_margin())
        phi, lost = fired.dense(fired.phi), fired.dense(fired.lost)
        novelty = analyse(self.tree_, self.leaf_gaussians_, X, fired, self.rule_prototypes_)
        reliability = self._reliability(X, fired, novelty.leaf_nll)
        radius = self._radius(X, phi, lost, domain)
        ranked = novelty.ranked(self.feature_names_, top_k)[0]
        typical = novelty.score()  # "typical", the default
        score = typical if kind == "typical" else self._read(X, evidence=False, score=kind).score
        mode, trust = self._discount_mode(), 1.0
        if mode == "typical":
            trust = typical_reliability(typical, self.rule_prototypes_.discount)[0]
        elif mode == "point":
            own_kind = default_kind(self)
            own = score if kind == own_kind else self._read(X, evidence=False, score=own_kind).score
            trust = point_reliability(self.discount_point_, own)[0]
        return build_explanation(self, X, phi, reliability, ranked, float(score[0]), kind, float(radius[0]),
                                 trust)
