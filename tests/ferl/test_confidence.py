"""The classifier-confidence novelty baselines (`ferl.benchmarks.confidence`)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import make_blobs
from sklearn.linear_model import LogisticRegression

from ferl import FERLClassifier
from ferl.benchmarks.confidence import ConfidenceDetector, confidence_score
from ferl.benchmarks.ood import DETECTORS, ferl_score
from ferl.evidence.weights import rule_sources


def test_scores_by_hand():
    p = np.array([[1.0, 0.0], [0.5, 0.5], [0.9, 0.1]])
    np.testing.assert_allclose(confidence_score(p, "msp"), [0.0, 0.5, 0.1])
    mixed = -(0.9 * np.log(0.9) + 0.1 * np.log(0.1))
    np.testing.assert_allclose(confidence_score(p, "entropy"), [0.0, np.log(2), mixed])
    with pytest.raises(ValueError, match="unknown confidence"):
        confidence_score(p, "margin")
    with pytest.raises(ValueError, match="unknown confidence"):
        ConfidenceDetector("margin")


def test_energy_is_minus_logsumexp_of_the_logits_and_grows_between_classes():
    X, y = make_blobs(300, 2, centers=[[-4, 0], [4, 0], [0, 6]], random_state=0)
    det = ConfidenceDetector("energy").fit(X, y)
    logits = LogisticRegression(max_iter=3000).fit(X, y).decision_function(X[:5])
    np.testing.assert_allclose(det.score(X[:5]), -np.log(np.exp(logits).sum(1)), rtol=1e-6)
    msp = DETECTORS["lr-msp"][1](0).fit(X, y)
    centre, between = np.array([[-4.0, 0.0]]), np.array([[0.0, 2.0]])
    assert msp.score(between)[0] > msp.score(centre)[0]


def test_binary_energy_uses_the_single_logit():
    X, y = make_blobs(200, 2, centers=[[-3, 0], [3, 0]], random_state=1)
    det = ConfidenceDetector("energy").fit(X, y)
    z = det.model_.decision_function(X[:3])
    np.testing.assert_allclose(det.score(X[:3]), -np.logaddexp(-z / 2, z / 2))


def test_ferl_betp_kinds_read_the_pignistic_probability():
    X, y = make_blobs(300, 3, centers=3, random_state=2)
    model = FERLClassifier("deep", random_state=0).fit(X, y)
    proba = model.predict_proba(X[:10])
    np.testing.assert_allclose(ferl_score(model, X[:10], "betp-msp"), 1 - proba.max(1))
    np.testing.assert_allclose(ferl_score(model, X[:10], "betp-entropy"), confidence_score(proba, "entropy"))


def test_energy_needs_learned_weights_and_is_minus_logsumexp_of_the_weights():
    X, y = make_blobs(300, 3, centers=3, random_state=3)
    with pytest.raises(ValueError, match="evidence_weights='learned'"):
        FERLClassifier("deep", random_state=0).fit(X, y).ood_score(X[:5], "energy")
    model = FERLClassifier("deep", random_state=0, evidence_weights="learned").fit(X, y)
    energy = model.ood_score(X[:20], "energy")
    np.testing.assert_array_equal(model.credal_readout(X[:20], "energy").ood_score, energy)
    phi = model.node_firing(X[:20])[:, model.tree_.is_leaf]
    s = rule_sources(X[:20], model.feature_range_, phi)
    w = s @ model.evidence_weights_.coef.T + model.evidence_weights_.intercept
    np.testing.assert_allclose(energy, -np.log(np.exp(w).sum(1)), rtol=1e-10)
    # Denoeux (2019): the normalised plausibility is the softmax of the same weights of evidence
    pl = model.evidence(X[:20]).plausibility
    np.testing.assert_allclose(pl / pl.sum(1, keepdims=True), np.exp(w + energy[:, None]), atol=1e-9)
