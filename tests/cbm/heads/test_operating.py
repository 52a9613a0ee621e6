"""The product's operating point: shift-adaptive sets, abstention, flags, and their explanation."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest

from cbm.heads import load_head, make_head
from cbm.heads.operating import (
    certified_radius,
    decide,
    explain_decision,
    fit_operating_point,
    operating_from_dict,
)
from ferl.evidence.adaptive import true_class_nll
from ferl.io.persist import current_folder

N_CLASSES, K = 12, 16


def _rows(rng, n, noise, shift=0.0):
    """Concept vectors of prototype classes; ``shift`` blurs them toward 0.5 (what a corruption does
    to the detector's probabilities) and raises the images' feature scores."""
    protos = np.random.default_rng(99).random((N_CLASSES, K)) > 0.5
    y = rng.integers(0, N_CLASSES, n)
    X = np.clip(protos[y] * 0.9 + 0.05 + rng.normal(0, noise, (n, K)), 0, 1)
    X = (1 - shift) * X + shift * rng.random((n, K))
    feature = np.abs(rng.normal(10 + 20 * shift, 2, n))
    return X, np.array([f"c{c:02d}" for c in y]), feature


@pytest.fixture(scope="module")
def head():
    rng = np.random.default_rng(0)
    X, y, _ = _rows(rng, 600, 0.15)
    head = make_head("ferl-deep", settings="concepts").fit(X, y, [f"k{j}" for j in range(K)])
    Xv, yv, fv = _rows(rng, 300, 0.15)
    head.fit_sets(Xv, yv, 0.9)
    head.fit_novelty(Xv, 0.05)
    head.fit_ood_threshold(Xv, 0.95)
    shifted = [_rows(rng, 300, 0.15, s) for s in (0.2, 0.4, 0.6, 0.8)]
    Xs, ys, fs = (np.concatenate(parts) for parts in zip(*shifted, strict=True))
    fit_operating_point(head, Xv, yv, fv, (Xs, ys, fs), coverage=0.9, max_set_size=5)
    head.val_ = (Xv, yv, fv)
    return head


def test_the_clean_val_rows_are_covered_as_split_conformal_counts(head):
    Xv, yv, fv = head.val_
    dec = decide(head, Xv, fv)
    covered = dec.sets[np.arange(len(yv)), head.class_index(yv)]
    assert covered.sum() >= math.ceil(0.9 * (len(yv) + 1))
    assert dec.abstained.mean() < 0.1 and dec.shift_flag.mean() <= 0.06


def test_sets_only_widen_as_the_image_shifts_and_wide_sets_abstain(head):
    Xs, _, fs = _rows(np.random.default_rng(3), 300, 0.15, 0.8)  # blurred concepts of shifted images
    before = decide(head, Xs, fs - 16.0)  # the same concepts with the clean images' feature scores
    after = decide(head, Xs, fs)
    assert np.all(after.sets >= before.sets) and after.sets.sum() > before.sets.sum()
    assert np.all(after.reliability <= before.reliability) and after.reliability.min() < 1
    assert np.all(after.evidence.ignorance >= before.evidence.ignorance - 1e-12)
    assert after.shift_flag.mean() > 0.9
    wide = after.sets.sum(axis=1)
    assert np.array_equal(after.abstained, wide == N_CLASSES)  # abstaining rows hold every class
    answered = ~after.abstained
    assert wide[answered].max() <= 5 and after.abstained.mean() > before.abstained.mean()
    pred_before = before.evidence.pignistic.argmax(axis=1)
    assert np.array_equal(pred_before, after.evidence.pignistic.argmax(axis=1))  # the class stays


def test_shifted_rows_keep_their_coverage_where_the_clean_threshold_loses_it(head):
    rng = np.random.default_rng(5)
    X, y, f = _rows(rng, 600, 0.15, 0.6)
    idx = head.class_index(y)
    adaptive = decide(head, X, f).sets[np.arange(len(y)), idx].mean()
    plain = head.predict_set(X)[np.arange(len(y)), idx].mean()  # the paper's DS-conformal set
    assert adaptive >= plain + 0.03 and adaptive >= 0.9


def test_unknown_feature_scores_read_as_their_clean_mean(head):
    Xv, _, _ = head.val_
    mean = head.operating_["reference"]["feature"][0]
    a, b = decide(head, Xv, None), decide(head, Xv, np.full(len(Xv), mean))
    np.testing.assert_array_equal(a.sets, b.sets)
    np.testing.assert_allclose(a.shift_score, b.shift_score)


def test_the_explanation_shows_the_decision(head):
    Xv, _, fv = head.val_
    dec = decide(head, Xv[:40], fv[:40] + 15.0)
    for i in range(40):
        ex = explain_decision(head, Xv[i], float(fv[i] + 15.0))
        assert ex.abstain == bool(dec.abstained[i])
        assert list(ex.credal_set) == [c for c, k in zip(head.classes_, dec.sets[i], strict=True) if k]
        assert ex.ignorance == pytest.approx(dec.evidence.ignorance[i], abs=1e-12)
        assert ex.reliability == pytest.approx(dec.reliability[i], abs=1e-12)


def test_saved_and_loaded_heads_decide_alike_and_damage_is_named(head, tmp_path):
    Xv, _, fv = head.val_
    head.save(tmp_path / "h")
    again = load_head(tmp_path / "h")
    a, b = decide(head, Xv, fv + 10), decide(again, Xv, fv + 10)
    np.testing.assert_array_equal(a.sets, b.sets)
    np.testing.assert_array_equal(a.ood_flag, b.ood_flag)
    saved = json.loads((current_folder(tmp_path / "h") / "head.json").read_text())["operating"]
    assert saved == json.loads(json.dumps(head.operating_))
    for damage in ({"sets": {**saved["sets"], "widening": [-1.0] * len(saved["sets"]["widening"])}},
                   {"max_set_size": 0}, {"shift_threshold": float("nan")},
                   {"reference": {**saved["reference"], "feature": [0.0, 0.0]}}):
        with pytest.raises(ValueError, match="head.json: the operating point is damaged.*refit the head"):
            operating_from_dict({**saved, **damage}, "h/head.json")


def test_a_head_without_operating_point_decides_with_its_plain_set(head):
    plain = make_head("ferl-deep", settings="concepts").fit(head.val_[0], head.val_[1],
                                                             [f"k{j}" for j in range(K)])
    dec = decide(plain, head.val_[0])
    np.testing.assert_array_equal(dec.sets, plain.predict_set(head.val_[0]))
    assert not dec.ood_flag.any() and np.all(dec.reliability == 1)


def test_the_nll_of_the_operating_point_is_the_true_class_plausibility(head):
    Xv, yv, _ = head.val_
    ev = head.model_.evidence(Xv)
    nll = true_class_nll(ev.plausibility, head.class_index(yv))
    assert np.allclose(np.exp(-nll), ev.plausibility[np.arange(len(yv)), head.class_index(yv)])


@pytest.mark.parametrize("call, message", [
    (lambda h: decide(h, h.val_[0], h.val_[2][:-1]), "feature scores must be"),
    (lambda h: decide(h, h.val_[0], np.full(len(h.val_[0]), np.nan)), "feature score of row 0 is nan"),
    # explaining several rows at once read them as one long row ("must have shape (n, 6), got (1, 12)")
    (lambda h: explain_decision(h, h.val_[0][:2]), "takes one concept vector, got an array of shape"),
    (lambda h: explain_decision(h, h.val_[0][0], float("inf")), "feature score of row 0 is inf"),
    (lambda h: explain_decision(h, h.val_[0][0].astype(str)), "concept vectors of head"),
    (lambda h: fit_operating_point(h, h.val_[0], h.val_[1], h.val_[2], max_set_size=0), "max_set_size"),
    (lambda h: fit_operating_point(h, h.val_[0], np.array(["zz"] * len(h.val_[0])), None), "none are"),
])
def test_bad_input_is_named(head, call, message):
    saved = head.operating_
    with pytest.raises(ValueError, match=message):
        call(head)
    head.operating_ = saved


def test_no_concept_vector_within_the_certified_radius_changes_the_decided_class(head):
    """The radius certifies `decide`'s class whatever the feature score (the discount it sets is
    uniform over the classes): 1000 points of the box (half vertices), clipped to [0, 1], each with
    a random feature score from clean to far shifted."""
    Xv, _, fv = head.val_
    radius = certified_radius(head, Xv[:60])
    assert (radius > 0).mean() >= 0.5
    decided = decide(head, Xv[:60], fv[:60]).evidence.pignistic.argmax(axis=1)
    np.testing.assert_array_equal(head.classes_[decided], head.predict(Xv[:60]))
    rng = np.random.default_rng(4)
    for i in np.flatnonzero(radius > 0)[:15]:
        r = min(radius[i], 1.0)
        steps = np.vstack([rng.uniform(-1, 1, (500, K)), rng.choice([-1.0, 1.0], (500, K))])
        moved = np.clip(Xv[i] + r * steps, 0.0, 1.0)
        dec = decide(head, moved, rng.uniform(0.0, 60.0, 1000))
        assert dec.reliability.min() < 1  # some of them are discounted
        assert (dec.evidence.pignistic.argmax(axis=1) == decided[i]).all()
        assert explain_decision(head, Xv[i], float(fv[i])).robustness_radius == radius[i]


def test_a_head_of_the_trees_evidence_certifies_nothing_about_its_decision(head):
    Xv, yv, _ = head.val_
    tree = make_head("ferl-medium").fit(Xv, yv, [f"k{j}" for j in range(K)])
    assert (tree.model_.robustness_radius(Xv[:20], domain=(0, 1)) > 0).any()  # P_T's, not the decision's
    np.testing.assert_array_equal(certified_radius(tree, Xv[:20]), np.zeros(20))
    assert explain_decision(tree, Xv[0]).robustness_radius == 0.0


def test_an_operating_point_that_discounts_below_the_floor_certifies_nothing(head):
    """A reliability below `DISCOUNT_FLOOR` could round the certified lead away (exp(-20) ~ 2e-9)."""
    Xv = head.val_[0][:10]
    assert (certified_radius(head, Xv) > 0).any()
    sets = head.operating_["sets"]
    steep = copy.deepcopy(head)
    steep.operating_["sets"] = {**sets, "widening": [20.0] * len(sets["widening"])}
    np.testing.assert_array_equal(certified_radius(steep, Xv), np.zeros(10))
    assert explain_decision(steep, Xv[0]).robustness_radius == 0.0
