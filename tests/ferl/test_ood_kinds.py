"""The kinds of OOD score: the product's three in ``ood_score``, the ablations through
`ferl.benchmarks.ood_kinds.ablation_score`, and the one kind the product uses (`default_kind`)."""

import copy

import numpy as np
import pytest
from sklearn.datasets import make_blobs

from ferl import FERLClassifier
from ferl.benchmarks.ood_kinds import ABLATION_KINDS, ablation_score
from ferl.novelty import OOD_KINDS, default_kind
from ferl.novelty.ood_score import SCORE_KINDS, check_kind


@pytest.fixture(scope="module")
def blobs():
    X, y = make_blobs(240, 4, centers=3, random_state=1)
    return X, y


@pytest.fixture(scope="module")
def tree_model(blobs):
    return FERLClassifier("deep", random_state=0).fit(*blobs)


@pytest.fixture(scope="module")
def learned_model(blobs):
    return FERLClassifier("deep", evidence_weights="learned", random_state=0).fit(*blobs)


def test_the_product_offers_three_kinds_and_the_ablations_the_rest():
    assert OOD_KINDS == ("typical", "joint", "energy")
    assert set(ABLATION_KINDS) == {"ignorance", "leaf", "nll", "combined", "residual", "firing", "prototype"}
    assert set(SCORE_KINDS) == set(OOD_KINDS) | set(ABLATION_KINDS)


@pytest.mark.parametrize("kind", ABLATION_KINDS)
def test_an_ablation_kind_is_refused_by_the_product_naming_the_ablation_function(tree_model, blobs, kind):
    X = blobs[0][:5]
    for call in (tree_model.ood_score, tree_model.credal_readout):
        with pytest.raises(ValueError, match=rf"{kind}.*ferl\.benchmarks\.ood_kinds\.ablation_score"):
            call(X, kind)
    with pytest.raises(ValueError, match="ablation_score"):
        tree_model.explain(X[0], kind=kind)
    assert np.isfinite(ablation_score(tree_model, X, kind)).all()


@pytest.mark.parametrize("kind", ["typical", "joint", "energy", "entropy", None])
def test_the_ablation_function_takes_the_ablation_kinds_only(learned_model, blobs, kind):
    with pytest.raises(ValueError, match="unknown ablation kind"):
        ablation_score(learned_model, blobs[0][:5], kind)


def test_the_default_of_ood_score_is_the_models_own_kind(tree_model, learned_model, blobs):
    X = blobs[0][:10]
    for model in (tree_model, learned_model):
        np.testing.assert_array_equal(model.ood_score(X), model.ood_score(X, default_kind(model)))


def test_the_product_kind_is_typical_for_the_tree_and_joint_once_learned_weights_are_calibrated(
        tree_model, learned_model, blobs):
    assert default_kind(tree_model) == "typical"
    assert default_kind(learned_model) == "energy"
    with pytest.raises(ValueError, match="calibrate_novelty"):
        learned_model.ood_score(blobs[0][:5], "joint")
    calibrated = copy.deepcopy(learned_model).calibrate_novelty(blobs[0][:80])
    assert default_kind(calibrated) == "joint" and check_kind("joint") == "joint"
    assert default_kind(copy.deepcopy(tree_model).calibrate_novelty(blobs[0][:80])) == "typical"


def test_the_joint_score_is_the_sum_of_the_standardised_typical_and_energy_scores(learned_model, blobs):
    X = blobs[0]
    model = copy.deepcopy(learned_model).calibrate_novelty(X[:120])
    t, e = model.ood_score(X[:120], "typical"), model.ood_score(X[:120], "energy")
    ref = model.novelty_reference_
    np.testing.assert_allclose(ref, [t.mean(), t.std(), e.mean(), e.std()], rtol=1e-12)
    joint = model.ood_score(X, "joint")
    expected = ((model.ood_score(X, "typical") - t.mean()) / t.std()
                + (model.ood_score(X, "energy") - e.mean()) / e.std())
    np.testing.assert_allclose(joint, expected, rtol=1e-10, atol=1e-12)
    # on the reference itself the standardised parts have mean 0: so has their sum
    assert abs(model.ood_score(X[:120], "joint").mean()) < 1e-9
    with pytest.raises(ValueError, match="evidence_weights='learned'"):
        FERLClassifier("deep", random_state=0).fit(*blobs).ood_score(X[:3], "joint")


def test_explain_shows_and_names_the_product_kind_or_the_one_asked(tree_model, learned_model, blobs):
    X = blobs[0]
    for model in (tree_model, learned_model):
        kind = default_kind(model)
        e = model.explain(X[7])
        assert e.ood_kind == kind and e.to_dict()["ood_kind"] == kind
        assert e.ood_score == pytest.approx(model.ood_score(X[7:8], kind)[0], rel=1e-12)
        assert f"{kind} OOD score = " in e.to_markdown()
        asked = model.explain(X[7], kind="typical")
        assert asked.ood_kind == "typical"
        assert asked.ood_score == pytest.approx(model.ood_score(X[7:8], "typical")[0], rel=1e-12)
    # the attributes are the parts of the typical score whatever the kind shown
    e = learned_model.explain(X[7], top_k=None)
    assert sum(a.score for a in e.anomalous_features) == pytest.approx(
        learned_model.ood_score(X[7:8], "typical")[0])
    assert "parts of the typical OOD score" in e.to_markdown()
    with pytest.raises(ValueError, match="evidence_weights='learned'"):
        tree_model.explain(X[7], kind="energy")
