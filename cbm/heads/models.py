"""The heads of the registry: FERL (compact / medium / deep), CART, LR and concept-restricted LR.

FERL heads save in FERL's own format (``model.json`` + ``model.npz``), LR heads their public
coefficients (``coef_``, ``intercept_``), and CART heads a `skops.io` file (``model.skops``) loaded
with an explicit list of trusted types; none uses pickle, and predictions after
`cbm.heads.load_head` equal the saved head's.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import skops.io as sio
from sklearn.linear_model import LogisticRegression
from sklearn.tree import DecisionTreeClassifier, export_text

from cbm.heads.base import ConceptHead, classes_from, classes_meta
from cbm.heads.operating import operating_from_dict
from ferl import FERLClassifier
from ferl.io.persist import atomic_write_bytes, read_model, write_model
from ferl.metrics import fit_acceptance_threshold
from ferl.novelty.discount import DiscountPointWarning
from ferl.novelty.ood_score import ABLATION_KINDS, OOD_KINDS, check_kind, default_kind
from ferl.rules import COLUMN_LEGEND

__all__ = ["CARTHead", "CONCEPT_SETTINGS", "FERLHead", "FERL_SETTINGS", "LRHead", "RestrictedLRHead"]

#: File of a CART head's estimator (`skops.io` format).
CART_FILE = "model.skops"

#: What a FERL head's learner settings may be: ``"learner"`` (the preset alone, as on tabular data;
#: the head's default) or ``"concepts"`` (`CONCEPT_SETTINGS` over the preset; ``fit-head``'s default).
FERL_SETTINGS = ("concepts", "learner")

#: `FERLClassifier` parameters of the FERL heads on concept vectors (``settings="concepts"``; ``fit-head
#: --ferl-settings``, default ``concepts``), by variant; beyond the paper. FERL-deep's, each with its reason:
#:
#: * ``evidence_weights="learned"`` (`ferl.evidence.weights`): the paper's combination of many partly fired
#:   leaves is under-confident and less accurate than a logistic regression on noisy concept vectors; the
#:   learned weights pool every concept as one-condition rules beside the tree's rules.
#: * ``min_width=0.5`` (bands half a concept's spread wide): on near-binary concept probabilities every
#:   bootstrap cut falls in the same gap, the learned half-width is 0 and the tree routes crisply, so one
#:   wrong concept would send an image down the wrong branch.
#: * ``n_bootstrap=5``: with bands this wide the half-width is ``min_width`` whatever the cuts' spread, so
#:   the bootstrap only places the cut, and five cuts place it as well as 25 with a fifth of the sweeps.
#: * ``rules_per_class=1``: the preset's floor of 200 rules binds up to 200 classes, so CUB-50 and the demo
#:   keep their budgets; past it, more rules per class would miss the fit-time target at 200 classes
#:   (docs/results/speed.md) without measurable gain.
#:
#: Chosen by measurement, by cross-validation on the train split of a CUB-50 run (val and test not read):
#: docs/results/concept-heads.md (the bands, ``scripts/bench_concept_heads.py``) and
#: docs/results/real-heads.md (the weights, the bootstrap and the budget,
#: ``scripts/study_concept_settings.py``).
#: Medium and compact keep their presets' trees and read them through learned weights too: the paper's
#: tree evidence of a head fitted on soft concept probabilities reads where a probability falls between
#: 0 and 1, so an expert's 0 / 1 answer can send an input to a leaf of another class, where the learned
#: weights' monotone term per concept can only move the evidence towards the answer
#: (docs/results/interventions/answers-that-hurt.md). The learner's defaults on tabular data stay those
#: chosen on the 30 KEEL sets (`ferl.presets`).
CONCEPT_SETTINGS: dict[str, dict] = {
    "compact": {"evidence_weights": "learned"},
    "medium": {"evidence_weights": "learned"},
    "deep": {"min_width": 0.5, "evidence_weights": "learned", "n_bootstrap": 5, "rules_per_class": 1.0},
}


class FERLHead(ConceptHead):
    """FERL rule tree head; ``variant`` is ``"compact"``, ``"medium"`` or ``"deep"``.

    ``settings`` (`FERL_SETTINGS`): ``"learner"`` (default) fits the variant's preset alone;
    ``"concepts"`` adds the concept-vector settings `CONCEPT_SETTINGS` (``fit-head``'s default).

    ``ood_threshold_`` (None until `fit_ood_threshold`, saved in ``head.json``) is the run's novelty
    threshold: ``{"kind", "accept", "value", "fitted_on", "n"}``; an input whose OOD score of that
    kind exceeds ``value`` is flagged as novel. `ood_kind` is the kind every output of the head
    shows. ``operating_`` (None until `cbm.heads.operating.fit_operating_point`, saved in
    ``head.json``) is the product's operating point: the shift-adaptive set, abstention and flags
    that every command reads through `cbm.heads.operating.decide`.

    The model keeps the paper's read-out (``novelty_discount=False``): the product discounts the
    evidence by the reliability of its operating point instead, which reads the detector's features
    as well as the concepts (docs/results/concept-heads.md, docs/results/shift.md).
    """

    kind = "ferl"

    def __init__(self, name: str, seed: int = 0, variant: str = "deep", settings: str = "learner") -> None:
        super().__init__(name, seed)
        if settings not in FERL_SETTINGS:
            raise ValueError(f"FERL head settings must be one of {list(FERL_SETTINGS)}, got {settings!r}")
        self.variant = variant
        self.settings = settings
        self.ood_threshold_: dict | None = None
        self.coverage_: float | None = None
        self.operating_: dict | None = None

    def _fit(self, X, y):
        params = CONCEPT_SETTINGS[self.variant] if self.settings == "concepts" else {}
        self.model_ = FERLClassifier(variant=self.variant, random_state=self.seed, **params)
        self.model_.fit(X, y, feature_names=self.concept_names_)

    def predict_set(self, X: np.ndarray, concept_names: Sequence[str] | None = None,
                    coverage: float | str | None = "head") -> np.ndarray:
        """Credal sets, bool ndarray of shape (n, C); all True = abstention.

        ``coverage="head"`` (default): the coverage-targeted set at the head's ``coverage_`` when
        `fit_sets` calibrated it, else the paper's interval-dominance set; None: the paper's set;
        a float: that coverage (`ferl.FERLClassifier.predict_set`).
        """
        coverage = self.coverage_ if coverage == "head" else coverage
        return self.model_.predict_set(self._check_X(X, concept_names), coverage=coverage)

    def fit_sets(self, X: np.ndarray, y: np.ndarray, coverage: float | None) -> None:
        """Calibrate the coverage-targeted credal set on held-out concept vectors ``X`` (n, k) with
        labels ``y`` (rows of classes the head never saw are left out); ``coverage`` None keeps the
        paper's interval-dominance set as the head's set. ValueError: a coverage outside (0, 1)."""
        if coverage is not None and not 0.0 < coverage < 1.0:
            raise ValueError(f"coverage must be in (0, 1) or null, got {coverage!r}")
        seen = np.isin(np.asarray(y), self.classes_)
        if coverage is not None and seen.any():
            self.model_.calibrate_sets(self._check_X(X)[seen], np.asarray(y)[seen])
            self.coverage_ = float(coverage)
        else:
            self.coverage_ = None

    def fit_novelty(self, X: np.ndarray, abstain: float = 0.05) -> None:
        """Calibrate the head's novelty score on held-out concept vectors ``X`` (n, k) of its classes
        (`ferl.FERLClassifier.calibrate_novelty`): the ``joint`` score's reference (learned weights),
        which makes ``joint`` the head's own kind (call `fit_ood_threshold` after it, so that the
        threshold is of that kind), and the learner's novelty-discount point (``abstain``), which the
        product does not read (its operating point discounts by the shift score instead).
        ValueError: bad concept vectors, ``abstain`` outside [0, 1). Its warnings name the head."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self.model_.calibrate_novelty(self._check_X(X), abstain=abstain, coverage=self.coverage_)
        for w in caught:  # fit-head calibrates every FERL head in turn: say which one this is
            if not issubclass(w.category, DiscountPointWarning):  # the product does not read that point
                warnings.warn(f"{self.name}: {w.message}", w.category, stacklevel=2)

    @property
    def ood_kind(self) -> str:
        """The kind of OOD score the head's outputs use (``predict``'s flag, explanations, reports):
        its threshold's (`ood_threshold_`), else the model's (`ferl.novelty.default_kind`)."""
        return default_kind(self.model_) if self.ood_threshold_ is None else self.ood_threshold_["kind"]

    def fit_ood_threshold(self, X: np.ndarray, accept: float = 0.95, kind: str | None = None,
                          fitted_on: str = "val") -> dict:
        """Fit the novelty threshold that accepts ``accept`` of the in-distribution inputs ``X``.

        The open-world protocol's rule (:func:`ferl.metrics.fit_acceptance_threshold`, paper Table 3
        "Reject" column): the ``ceil(accept * n)``-th smallest OOD score of ``X`` (n, k), so "score <=
        value" accepts at least ``accept`` of them. ``fit-head`` fits it on the val split at 95 %.
        ``kind`` (`ferl.novelty.ood_score.OOD_KINDS`) None: the model's, `ferl.novelty.default_kind`:
        ``energy`` for a head with learned weights of evidence (the open-world score that ranks
        held-out classes best on real concept vectors, ahead of a logistic regression's own energy
        and entropy; docs/results/real-heads.md), else ``typical``.

        Returns
        -------
        dict
            The new ``ood_threshold_``.

        Raises
        ------
        ValueError
            Bad concept vectors, an unknown ``kind``, ``accept`` outside (0, 1].
        """
        kind = default_kind(self.model_) if kind is None else check_kind(kind)
        scores = self.model_.ood_score(self._check_X(X), kind)
        self.ood_threshold_ = {"kind": kind, "accept": float(accept),
                               "value": fit_acceptance_threshold(scores, accept), "fitted_on": fitted_on,
                               "n": int(scores.size)}
        return self.ood_threshold_

    def concepts_used(self):  # the tree's conditions and the concepts of the learned weights
        return self.model_.features_used_

    def size(self):
        return {"rules": int(self.model_.n_rules_), "nonzero_weights": None,
                "concepts_used": int(self.concepts_used().size), "evidence": self.model_.evidence_weights}

    def describe(self):
        return (f"# {self.name}: {self.model_.n_rules_} rules over {self.concepts_used().size} concepts\n\n"
                "```\n" + self.model_.export_text() + "\n```\n\n" + COLUMN_LEGEND + "\n")

    def _save_model(self, path):
        self.model_.save(path)
        return {"variant": self.variant, "settings": self.settings, "ood_threshold": self.ood_threshold_,
                "coverage": self.coverage_, "operating": self.operating_}

    def _load_model(self, path, doc):
        self.variant = doc["variant"]
        self.settings = doc.get("settings", "learner")  # heads saved before it existed used the preset
        self.ood_threshold_ = _checked_threshold(doc.get("ood_threshold"), path)  # None in older heads
        self.operating_ = operating_from_dict(doc.get("operating"), f"{path}/head.json")
        self.model_ = FERLClassifier.load(path)
        coverage = doc.get("coverage")  # absent in heads saved before it existed
        calibrated = getattr(self.model_, "set_scores_", None) is not None
        if coverage is not None and (isinstance(coverage, bool) or not isinstance(coverage, (int, float))
                                     or not 0.0 < coverage < 1.0 or not calibrated):
            raise ValueError(f"head.json: coverage must be a number in (0, 1) with calibrated set scores, "
                             f"got {coverage!r}")
        self.coverage_ = coverage


def _checked_threshold(threshold, path) -> dict | None:
    """A saved novelty threshold, or ValueError naming what is wrong and asking for a refit: a null or
    NaN value, a kind the product no longer offers (an ablation kind such as ``leaf``)."""
    if threshold is None:
        return None
    where = f"{path}/head.json: ood_threshold"
    if not isinstance(threshold, dict):
        raise ValueError(f"{where} must be an object or null, got {threshold!r}; refit the head (fit-head)")
    kind, value, accept = threshold.get("kind"), threshold.get("value"), threshold.get("accept")
    problems = []
    if kind in ABLATION_KINDS:
        problems.append(f"kind {kind!r} is an ablation kind of OOD score, no longer one the product flags "
                        f"with ({list(OOD_KINDS)})")
    elif kind not in OOD_KINDS:
        problems.append(f"kind must be one of {list(OOD_KINDS)}, got {kind!r}")
    if isinstance(accept, bool) or not isinstance(accept, int | float) or not 0 < accept <= 1:
        problems.append(f"accept must be in (0, 1], got {accept!r}")
    if isinstance(value, bool) or not isinstance(value, int | float) or not np.isfinite(value):
        problems.append(f"value must be a finite number, got {value!r}")
    if problems:
        raise ValueError(f"{where}: {'; '.join(problems)}; refit the head (fit-head)")
    return threshold


class CARTHead(ConceptHead):
    """CART (scikit-learn ``DecisionTreeClassifier`` with its defaults, seeded).

    ``max_leaf_nodes`` (None: unbounded) grows the tree best-first to at most that many leaves: the
    registry's ``cart-compact``, the CART with as many leaves as FERL-compact has rules, is
    ``sized``: `fit` refuses to grow it unbounded (its size must come from that fit).

    Saved as a `skops.io` file; loading trusts only the types `skops.io` trusts by default plus the
    class of the public ``tree_`` attribute of a fitted ``DecisionTreeClassifier`` (any other type
    in the file raises ValueError).
    """

    kind = "cart"
    answered_fit = True  # its splits read where a soft probability falls: a 0 / 1 answer breaks them

    def __init__(self, name: str, seed: int = 0, max_leaf_nodes: int | None = None,
                 sized: bool = False) -> None:
        super().__init__(name, seed)
        self.max_leaf_nodes, self.sized = max_leaf_nodes, sized

    def _fit(self, X, y):
        if self.sized and self.max_leaf_nodes is None:
            raise ValueError(f"head {self.name!r} needs max_leaf_nodes >= 2 (the FERL-compact rule count), "
                             f"got None")
        self.model_ = DecisionTreeClassifier(max_leaf_nodes=self.max_leaf_nodes,
                                             random_state=self.seed).fit(X, y)

    def size(self):
        return {"rules": int(self.model_.get_n_leaves()), "nonzero_weights": None,
                "concepts_used": int(self.concepts_used().size)}

    def describe(self):
        text = export_text(self.model_, feature_names=self.concept_names_, class_names=None)
        return (f"# {self.name}: {self.model_.get_n_leaves()} leaves over {self.concepts_used().size} "
                f"concepts\n\n```\n{text}```\n")

    def _save_model(self, path):
        path.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path / CART_FILE, sio.dumps(self.model_))
        return {}

    def _load_model(self, path, doc):
        file = path / CART_FILE
        if not file.is_file():
            if (path / "model.json").is_file():
                raise ValueError(
                    f"{path}: this CART head was saved by an earlier ferl-cbm in a format that relied on "
                    f"scikit-learn's private tree state and can no longer be loaded; refit it with "
                    f"`fit-head --run <run-dir> --heads cart`")
            raise FileNotFoundError(f"{file} not found (the CART head's model file)")
        data = file.read_bytes()
        trusted = _trusted_cart_types()
        try:
            found = sio.get_untrusted_types(data=data)
        except Exception as err:  # skops raises several kinds for a corrupted file
            raise ValueError(f"{file} is not a readable skops file: {err}") from err
        unexpected = sorted(set(found) - set(trusted))
        if unexpected:
            raise ValueError(f"{file} holds types outside the trusted list {trusted}: {unexpected}")
        model = sio.loads(data, trusted=trusted)
        if not isinstance(model, DecisionTreeClassifier):
            raise ValueError(f"{file} holds a {type(model).__name__}, not a DecisionTreeClassifier")
        self.model_, self.max_leaf_nodes = model, model.max_leaf_nodes


def _trusted_cart_types() -> list[str]:
    """Names of the types a CART file may hold beyond skops' defaults: the class of ``tree_``.

    Taken from a fitted two-sample tree rather than written out, so the list follows whatever class
    scikit-learn documents as the public ``DecisionTreeClassifier.tree_`` attribute.
    """
    tree_type = type(DecisionTreeClassifier().fit([[0.0], [1.0]], [0, 1]).tree_)
    return [f"{tree_type.__module__}.{tree_type.__qualname__}"]


class LRHead(ConceptHead):
    """Multinomial logistic regression over all concepts (``LogisticRegression(max_iter=2000)``)."""

    kind = "lr"

    def _fit(self, X, y):
        self.model_ = LogisticRegression(max_iter=2000).fit(X, y)

    def _weights(self) -> np.ndarray:
        """Coefficients over all k concepts, shape (n_rows, k) (1 row for two classes)."""
        return self.model_.coef_

    def concepts_used(self):
        return np.flatnonzero(np.any(self._weights() != 0, axis=0))

    def size(self):
        return {"rules": None, "nonzero_weights": int(np.count_nonzero(self.model_.coef_)),
                "concepts_used": int(self.concepts_used().size)}

    def describe(self, top: int = 10) -> str:
        W = self._weights()
        lines = [f"# {self.name}: {np.count_nonzero(self.model_.coef_)} non-zero weights over "
                 f"{self.concepts_used().size} concepts", "",
                 f"Largest {top} weights (by |w|) per class:", ""]
        rows = self.classes_ if W.shape[0] > 1 else self.classes_[1:]
        for c, w in zip(rows, W, strict=True):
            order = np.argsort(-np.abs(w), kind="stable")[:top]
            lines.append(f"- **{c}**: " + ", ".join(f"{self.concept_names_[j]} {w[j]:+.2f}" for j in order))
        return "\n".join(lines) + "\n"

    def _save_model(self, path):
        est = self.model_
        meta = {"estimator": "LogisticRegression", "params": est.get_params(),
                "n_features": int(est.n_features_in_), **classes_meta(est.classes_)}
        write_model(path, meta, {"coef": est.coef_, "intercept": est.intercept_, "n_iter": est.n_iter_})
        return {}

    def _load_model(self, path, doc):
        meta, arrays = read_model(path)
        est = LogisticRegression(**meta["params"])
        est.coef_, est.intercept_, est.n_iter_ = arrays["coef"], arrays["intercept"], arrays["n_iter"]
        est.classes_, est.n_features_in_ = classes_from(meta), meta["n_features"]
        self.model_ = est


class RestrictedLRHead(LRHead):
    """LR refitted on the ``n_concepts`` concepts with the largest full-LR weight magnitude.

    The rank of concept j is ``std(x_j) * ||W[:, j]||_2`` with W the full LR's coefficients on the
    same training rows (ties broken by the lower index). ``n_concepts`` is set by the caller,
    e.g. to FERL-deep's ``size()["concepts_used"]`` (paper Table 4); it is capped at k.
    """

    kind = "lr-restricted"

    def __init__(self, name: str, seed: int = 0, n_concepts: int | None = None) -> None:
        super().__init__(name, seed)
        self.n_concepts = n_concepts

    def _fit(self, X, y):
        if self.n_concepts is None or self.n_concepts < 1:
            raise ValueError(f"head {self.name!r} needs n_concepts >= 1 (the FERL-deep concept count), "
                             f"got {self.n_concepts}")
        full = LogisticRegression(max_iter=2000).fit(X, y)
        score = X.std(axis=0) * np.linalg.norm(full.coef_, axis=0)
        keep = min(int(self.n_concepts), X.shape[1])
        self.selected_ = np.sort(np.argsort(-score, kind="stable")[:keep])
        self.model_ = LogisticRegression(max_iter=2000).fit(X[:, self.selected_], y)

    def _model_inputs(self, X):
        return X[:, self.selected_]

    def _weights(self):
        W = np.zeros((self.model_.coef_.shape[0], len(self.concept_names_)))
        W[:, self.selected_] = self.model_.coef_
        return W

    def describe(self, top: int = 10) -> str:
        chosen = ", ".join(self.concept_names_[j] for j in self.selected_)
        return (super().describe(top) + f"\nConcepts kept ({self.selected_.size}, by |full-LR weight| x "
                f"std): {chosen}\n")

    def _save_model(self, path):
        super()._save_model(path)
        return {"n_concepts": self.n_concepts, "selected": self.selected_.tolist()}

    def _load_model(self, path, doc):
        super()._load_model(path, doc)
        self.n_concepts = doc["n_concepts"]
        self.selected_ = np.asarray(doc["selected"], dtype=np.int64)
