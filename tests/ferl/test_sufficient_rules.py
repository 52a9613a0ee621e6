"""The sufficient rules of an explanation: the fewest sources whose weights of evidence, with the
prior, reach 90 % of the margin log Pl(top) - log Pl(runner-up) (`ferl.evidence.weights`)."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.datasets import make_classification

from ferl import FERLClassifier
from ferl.evidence.sufficiency import (
    SUFFICIENT_SHARE,
    sufficient_counts,
    sufficient_rule_counts,
    sufficient_sources,
)
from ferl.evidence.weights import EvidenceWeights


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), n_sources=st.integers(1, 7), share=st.sampled_from([0.5, 0.9, 1.0]))
def test_the_listed_sources_are_the_fewest_that_reach_the_share(seed, n_sources, share):
    rng = np.random.default_rng(seed)
    weights = EvidenceWeights(coef=rng.normal(0, 2, (3, n_sources)), intercept=rng.normal(0, 1, 3))
    s = rng.random(n_sources)
    index, part, margin, prior = sufficient_sources(weights, s, 0, 1, share)
    full = (weights.coef[0] - weights.coef[1]) * s
    assert margin == pytest.approx(prior + full.sum())
    np.testing.assert_allclose(part, full[index])
    if margin <= 0:
        assert index.size == 0
        return
    need = share * margin * (1 - 1e-12)
    assert prior + part.sum() >= need
    assert np.all(part > 0) and np.all(np.diff(part) <= 0)
    smaller = [c for k in range(index.size) for c in combinations(range(n_sources), k)]
    assert all(prior + full[list(c)].sum() < need for c in smaller)  # no fewer sources reach it
    assert sufficient_counts(weights, s[None], np.array([0]), np.array([1]), share)[0] == index.size


@pytest.mark.parametrize("sources, top, runner_up, share, message", [
    (np.ones((1, 3)), [0], [1], 0.0, "share must be a number in"),
    (np.ones((1, 3)), [0], [1], True, "share must be a number in"),
    (np.ones((2, 3)), [0], [1], 0.9, "one class per row"),
    (np.ones((1, 4)), [0], [1], 0.9, r"shape \(n, 3\)"),
    (np.full((1, 3), np.nan), [0], [1], 0.9, r"strengths in \[0, 1\]"),
    (-np.ones((1, 3)), [0], [1], 0.9, r"strengths in \[0, 1\]"),
    (np.ones((1, 3)), [-1], [1], 0.9, r"class indices in \[0, 2\)"),
    (np.ones((1, 3)), [0.0], [1], 0.9, "class indices"),
    (np.ones((1, 3)), [1], [1], 0.9, "different classes"),
])
def test_counts_check_their_inputs(sources, top, runner_up, share, message):
    """Bad strengths or class indices gave numpy's broadcast errors, a last class for -1, or a NaN
    margin with no sources."""
    weights = EvidenceWeights(coef=np.ones((2, 3)), intercept=np.zeros(2))
    with pytest.raises(ValueError, match=message):
        sufficient_counts(weights, sources, np.array(top), np.array(runner_up), share=share)
    with pytest.raises(ValueError, match="one input"):
        sufficient_sources(weights, np.ones((2, 3)), 0, 1)


@pytest.fixture(scope="module")
def learned():
    X, y = make_classification(400, 8, n_informative=5, n_classes=4, random_state=0)
    X = (X - X.min(0)) / (X.max(0) - X.min(0))
    model = FERLClassifier("deep", min_width=0.5, evidence_weights="learned", n_bootstrap=5,
                           rules_per_class=1.0, random_state=0).fit(X, y)
    return model, X


def test_explanations_list_the_sufficient_rules_of_their_margin(learned):
    model, X = learned
    counts = sufficient_rule_counts(model, X)
    assert np.array_equal(counts, [len(model.explain(x).decisive) for x in X])
    assert counts.max() >= 2 and (counts > 0).mean() > 0.5  # the case needs rules, not only the prior
    for x in X[:20]:
        ex = model.explain(x)
        names = list(ex.classes)
        top, runner_up = names.index(ex.prediction), names.index(ex.runner_up)
        # the margin is the plausibilities' log ratio, as the rules' parts say
        assert ex.margin == pytest.approx(np.log(ex.plausibility[top] / ex.plausibility[runner_up]), rel=1e-9)
        shares = [q for *_, q in ex.decisive]
        assert ex.prior / ex.margin + sum(shares) >= SUFFICIENT_SHARE - 1e-9
        if shares:
            assert ex.prior / ex.margin + sum(shares[:-1]) < SUFFICIENT_SHARE
    ex = model.explain(X[int(np.argmax(counts))])
    text = ex.to_markdown()
    assert f"log Pl({ex.prediction}) − log Pl({ex.runner_up}) = {ex.margin:.3f} nats" in text
    assert text.count(" % |") == len(ex.decisive)
    assert ex.to_dict()["decisive"][0]["share"] == pytest.approx(ex.decisive[0][3])


def test_a_margin_that_is_not_positive_says_so(learned):
    """Where BetP's top class does not lead in plausibility the section vanished without a word."""
    from dataclasses import replace

    from ferl.explain import NO_MARGIN

    model, X = learned
    ex = replace(model.explain(X[0]), decisive=(), margin=-0.01)
    assert NO_MARGIN in ex.to_markdown()


def test_an_unfitted_model_is_said_unfitted():
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        sufficient_rule_counts(FERLClassifier("deep", evidence_weights="learned"), np.zeros((2, 4)))


def test_tree_evidence_has_no_sufficient_rules(learned):
    _, X = learned
    y = (X[:, 0] > 0.5).astype(int)
    tree = FERLClassifier("compact", random_state=0).fit(X, y)
    assert tree.explain(X[0]).decisive == () and tree.explain(X[0]).margin is None
    with pytest.raises(ValueError, match="learned weights of evidence"):
        sufficient_rule_counts(tree, X)
