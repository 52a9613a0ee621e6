"""Concept interventions: concept side, head side, policies and curves."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from cbm.concepts.interventions import ConceptGroups, ExpertValues, apply_answers, intervene
from cbm.data.synthetic_world import make_world
from cbm.heads import make_head
from cbm.heads.interventions import expert_values_for, explain, head_outputs, reached_concepts
from cbm.heads.policies import POLICIES, choose_groups, group_scores
from cbm.interventions.curves import intervention_curve, k_grid


@pytest.fixture(scope="module")
def world_data():
    """Noisy concept vectors of a synthetic world's classes:
    (X_train, y, X_test, labels_test, y_test, groups)."""
    world = make_world(n_classes=8, n_heldout=0, seed=0)
    rng = np.random.default_rng(0)

    def draw(n):
        y = rng.integers(0, 8, n)
        labels = world.class_concepts[y].copy()
        return np.clip(0.15 + 0.7 * labels + rng.normal(0, 0.15, labels.shape), 0, 1), labels, y

    X, labels_train, y = draw(400)
    X_test, labels_test, y_test = draw(120)
    groups = ConceptGroups.from_concepts(world.concept_names, labels=labels_train)
    return X, y, X_test, labels_test, y_test, groups


@pytest.fixture(scope="module")
def heads(world_data):
    X, y, *_, groups = world_data
    names = list(groups.concept_names)
    return {h: make_head(h, seed=0).fit(X, y, names) for h in ("ferl-deep", "ferl-compact", "cart", "lr")}


def test_groups_come_from_names_and_one_hot_from_labels(world_data):
    *_, groups = world_data
    assert groups.names == ("shape", "colour", "size", "pattern", "background", "count", "position")
    assert all(groups.exclusive)
    assert [len(m) for m in groups.members] == [6, 6, 2, 3, 3, 2, 2]
    plain = ConceptGroups.from_concepts(["black", "white", "stripes"])  # AwA2: one group per predicate
    assert plain.names == ("black", "white", "stripes") and not any(plain.exclusive)


def test_group_interventions_keep_one_hot_groups_one_hot(world_data):
    *_, X_test, _, _, groups = world_data
    shape = list(groups.members[groups.group_index("shape")])
    by_value = intervene(X_test[:5], groups, {"shape": "triangle"})
    assert np.array_equal(by_value.X[:, shape], np.tile([0, 0, 1, 0, 0, 0], (5, 1)))
    by_concept = intervene(X_test[:5], groups, {"shape::square": 1.0})
    assert np.array_equal(by_concept.X[:, shape], np.tile([0, 1, 0, 0, 0, 0], (5, 1)))
    assert by_concept.mask[:, shape].all() and not by_concept.mask[:, ~np.isin(np.arange(24), shape)].any()
    with pytest.raises(ValueError, match="one-hot"):
        intervene(X_test[:5], groups, {"shape": [1, 1, 0, 0, 0, 0]})
    # the curve's answers are true labels: every one-hot group stays one-hot at every k
    mask = groups.concept_mask(np.ones((5, groups.n_groups), dtype=bool))
    answered = apply_answers(X_test[:5], world_data[3][:5], mask, ExpertValues.labels(24))
    for g in groups.members:
        assert np.array_equal(answered[:, list(g)].sum(axis=1), np.ones(5))


@pytest.mark.parametrize(("values", "message"), [
    ({"shape::hexagon": 1.0}, "unknown concept or group 'shape::hexagon'"),
    ({"texture": "rough"}, "unknown concept or group 'texture'"),
    ({"size::large": 1.5}, r"'size::large' is 1.5, outside \[0, 1\]"),
    ({"size::large": -0.1}, "outside"),
    ({"shape": "hexagon"}, "'hexagon' is not a concept of group 'shape'"),
    ({"size": [1, 0, 0]}, "group 'size' has 2 concepts, got 3"),
    ({"size::large": "yes"}, "not a number"),
    ({}, "non-empty mapping"),
])
def test_bad_interventions_name_the_problem(world_data, values, message):
    *_, X_test, _, _, groups = world_data
    with pytest.raises(ValueError, match=message):
        intervene(X_test[:3], groups, values)


def test_bad_concept_matrices_are_refused(world_data):
    *_, X_test, _, _, groups = world_data
    with pytest.raises(ValueError, match=r"shape \(n, 24\)"):
        intervene(X_test[:3, :5], groups, {"size": "large"})
    bad = X_test[:3].copy()
    bad[1, 4] = 2.0
    with pytest.raises(ValueError, match="row 1, concept 'shape::diamond' is 2.0"):
        intervene(bad, groups, {"size": "large"})
    with pytest.raises(ValueError, match="out of range"):
        intervene(X_test[:3], groups, {"size": "large"}, rows=[5])


def test_a_concept_no_fired_rule_tests_leaves_ferl_masses_unchanged(world_data, heads):
    *_, X_test, _, _, groups = world_data
    head = heads["ferl-deep"]
    reached = reached_concepts(head, X_test)
    assert reached.any(axis=1).all() and not reached.all()
    # exact with the novelty discount off (the paper's read-out); with it on (the CBM heads' setting)
    # every concept also moves the sources' reliabilities
    model = copy.deepcopy(head.model_).set_params(novelty_discount=False)
    checked = 0
    for i in range(len(X_test)):
        for j in np.flatnonzero(~reached[i])[:3]:
            x = X_test[i:i + 1].copy()
            moved = x.copy()
            moved[0, j] = 1.0 - np.round(x[0, j])  # the opposite answer
            before, after = model.evidence(x), model.evidence(moved)
            assert np.array_equal(before.mass, after.mass)
            assert np.array_equal(before.ignorance, after.ignorance)
            checked += 1
    assert checked > 100
    # and a concept it does test can change them
    i = 0
    j = int(np.flatnonzero(reached[i])[0])
    moved = X_test[i:i + 1].copy()
    moved[0, j] = 1.0 - np.round(moved[0, j])
    assert not np.array_equal(model.evidence(X_test[i:i + 1]).mass, model.evidence(moved).mass)


@pytest.mark.parametrize("name", ["ferl-deep", "ferl-compact", "cart", "lr"])
def test_intervening_with_the_predicted_values_changes_nothing(world_data, heads, name):
    *_, X_test, _, _, groups = world_data
    head = heads[name]
    before = head_outputs(head, X_test)
    mask = np.ones(X_test.shape, dtype=bool)
    after = head_outputs(head, apply_answers(X_test, X_test, mask, ExpertValues.labels(24)))
    assert np.array_equal(before.proba, after.proba)
    if before.sets is not None:
        assert np.array_equal(before.sets, after.sets) and np.array_equal(before.ood, after.ood)
    loose = ConceptGroups.from_concepts(groups.concept_names)  # no one-hot flags: soft group values allowed
    values = {g: X_test[0, list(m)] for g, m in zip(loose.names, loose.members, strict=True)}
    assert np.array_equal(intervene(X_test, loose, values, rows=[0]).X, X_test)
    below = {c: X_test[0, j] for j, c in enumerate(groups.concept_names) if X_test[0, j] < 0.5}
    assert np.array_equal(intervene(X_test, groups, below, rows=[0]).X, X_test)


def test_expert_values_percentiles_for_lr_labels_otherwise(world_data, heads):
    X = world_data[0]
    lr = expert_values_for(heads["lr"], X)
    assert lr.mode == "percentiles" and np.allclose(lr.low, np.percentile(X, 5, axis=0))
    assert np.allclose(lr(np.array([[0.0] * 24, [1.0] * 24])), [lr.low, lr.high])
    assert expert_values_for(heads["ferl-deep"], X).mode == "labels"
    with pytest.raises(ValueError, match="unknown expert-value mode"):
        expert_values_for(heads["lr"], X, "logits")


def test_explain_records_the_intervened_concepts(world_data, heads):
    *_, X_test, _, _, groups = world_data
    ex = explain(heads["ferl-deep"], X_test[0], groups, {"shape": "ring", "size::large": 0.0})
    recorded = {r["concept"]: (r["before"], r["after"]) for r in ex.intervened}
    assert set(recorded) == {*[groups.concept_names[j] for j in groups.members[0]], "size::large"}
    large = groups.concept_index("size::large")
    assert recorded["shape::ring"][1] == 1.0 and recorded["size::large"] == (X_test[0, large], 0.0)
    doc = ex.to_dict()
    assert doc["intervened"] and doc["before"]["prediction"] is not None
    assert "**Intervened concepts**" in ex.to_markdown() and "shape::ring" in ex.to_markdown()
    with pytest.raises(ValueError, match="not a FERL head"):
        explain(heads["lr"], X_test[0], groups, {"size": "large"})


def test_policies_pick_unasked_groups_reproducibly(world_data, heads):
    *_, X_test, _, _, groups = world_data
    asked = np.zeros((len(X_test), groups.n_groups), dtype=bool)
    asked[:, 0] = True
    expert = ExpertValues.labels(24)
    for policy in POLICIES:
        a = group_scores(policy, heads["ferl-deep"], X_test, groups, expert, asked, np.random.default_rng(1))
        b = group_scores(policy, heads["ferl-deep"], X_test, groups, expert, asked, np.random.default_rng(1))
        assert np.array_equal(a, b) and np.isneginf(a[:, 0]).all() and np.isfinite(a[:, 1:]).all()
        chosen = choose_groups(a, 2)
        assert (chosen.sum(axis=1) == 2).all() and not chosen[:, 0].any()
    unc = group_scores("uncertainty", heads["lr"], X_test, groups, expert, asked, np.random.default_rng(0))
    free = np.flatnonzero(groups.group_of != 0)
    j = int(free[np.argmin(np.abs(X_test[0, free] - 0.5))])
    assert unc[0, groups.group_of[j]] == pytest.approx(1 - 2 * abs(X_test[0, j] - 0.5))
    with pytest.raises(ValueError, match="needs a FERL head"):
        group_scores("evidence", heads["lr"], X_test, groups, expert, asked, np.random.default_rng(0))
    with pytest.raises(ValueError, match="unknown intervention policy"):
        group_scores("oracle", heads["lr"], X_test, groups, expert, asked, np.random.default_rng(0))


def test_evidence_scores_groups_the_decision_cannot_rest_on_below_the_others(world_data, heads):
    *_, X_test, _, _, groups = world_data
    head = heads["ferl-deep"]
    reached = reached_concepts(head, X_test)
    asked = np.zeros((len(X_test), groups.n_groups), dtype=bool)
    score = group_scores("evidence", head, X_test, groups, ExpertValues.labels(24), asked,
                         np.random.default_rng(0))
    untouched = ~(groups.membership[None] & reached[:, None]).any(axis=2)  # (n, G)
    assert untouched.any()
    assert (score[untouched] <= 1e-6).all()  # only the anomaly tie-breaker


@pytest.mark.parametrize("name", ["ferl-deep", "lr"])
def test_full_intervention_gives_the_accuracy_on_true_concepts(world_data, heads, name):
    X, y, X_test, labels, y_test, groups = world_data
    head = heads[name]
    expert = expert_values_for(head, X)
    y_idx = head.class_index(y_test)
    ks = k_grid(groups.n_groups)
    assert ks == list(range(8))
    for policy in ("random", "ectp"):
        curve = intervention_curve(head, X_test, labels, groups, expert, policy, ks, y_idx=y_idx)
        true_acc = np.mean(head.predict(expert(labels)) == y_test)
        assert curve.points[-1]["accuracy"] == pytest.approx(true_acc)
        assert curve.points[0]["accuracy"] == pytest.approx(np.mean(head.predict(X_test) == y_test))
        assert (curve.asked > 0).all() and sorted(np.unique(curve.asked)) == list(range(1, 8))
    with pytest.raises(ValueError, match="must increase from 0"):
        intervention_curve(head, X_test, labels, groups, expert, "random", [0, 3, 2])


def test_k_grid_is_sparse_beyond_thirty_groups():
    assert k_grid(85)[:8] == [0, 1, 2, 3, 4, 5, 6, 8] and k_grid(85)[-1] == 85
    assert k_grid(28) == list(range(29))
    assert k_grid(7, [2, 20]) == [0, 2, 7]
