"""Rule prototypes (`ferl.novelty.prototypes`): the ``"prototype"`` distance and the ``"typical"`` score."""

import warnings
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ferl import FERLClassifier
from ferl.benchmarks.ood import ferl_score
from ferl.benchmarks.ood_kinds import ablation_score
from ferl.io import persist
from ferl.metrics import ood_auroc
from ferl.novelty import prototypes, scores
from ferl.novelty.ood_score import tail_nats
from ferl.novelty.prototypes import MIN_SUPPORT, nearest_prototype, prototype_distance
from ferl.novelty.scores import analyse


def test_the_prototype_distance_is_the_l1_distance_in_ranges_to_the_nearest_leaf_mean(wine_deep, wine):
    X_tr, X_te, _, _ = wine
    leaves, P = wine_deep.leaf_gaussians_, wine_deep.rule_prototypes_
    index, unit = P.index, P.unit
    span = X_tr.max(axis=0) - X_tr.min(axis=0)  # the raw training ranges
    np.testing.assert_allclose(unit, span / leaves.scale, rtol=1e-12)
    raw_means = leaves.center + leaves.scale * leaves.mean[index]
    brute = (np.abs(X_te[:, None, :] - raw_means[None]) / span).sum(axis=2)
    distance, nearest = nearest_prototype(X_te, leaves, index, unit)
    np.testing.assert_allclose(distance, brute.min(axis=1), rtol=1e-9)  # float32 search, exact nearest
    np.testing.assert_array_equal(nearest, brute.argmin(axis=1))
    np.testing.assert_allclose(distance, brute[np.arange(len(brute)), nearest], rtol=1e-9)
    parts = prototype_distance(X_te, leaves, index, unit)[0]
    np.testing.assert_allclose(parts.sum(axis=1), distance, rtol=1e-12)
    np.testing.assert_allclose(ablation_score(wine_deep, X_te, "prototype"), distance, rtol=1e-12)


def test_a_change_across_a_features_whole_training_range_counts_one_whatever_its_spread(wine_deep, wine):
    """The unit is the training range, not the standard deviation: a near-binary concept that flips
    counts as much as a wide continuous feature moved from its minimum to its maximum."""
    X_tr = wine[0]
    leaves, P = wine_deep.leaf_gaussians_, wine_deep.rule_prototypes_
    first = P.index[:1]
    x = (leaves.center + leaves.scale * leaves.mean[first])  # at the first prototype: distance 0
    span = X_tr.max(axis=0) - X_tr.min(axis=0)
    for f in (int(np.argmin(leaves.scale)), int(np.argmax(leaves.scale))):
        for t in (0.5, 1.0, 3.0):
            moved = x.copy()
            moved[0, f] += t * span[f]
            np.testing.assert_allclose(nearest_prototype(moved, leaves, first, P.unit)[0], [t], rtol=1e-9)


def test_feature_ranges_are_standardised_ranges_of_the_positive_weight_rows_and_one_when_constant():
    leaves = SimpleNamespace(center=np.array([1.0, 0.0, 5.0]), scale=np.array([2.0, 0.5, 1.0]))
    X = np.array([[0.0, 1.0, 5.0], [4.0, -1.0, 5.0], [100.0, 9.0, 5.0]])
    feature_range = np.stack([X[:2].min(axis=0), X[:2].max(axis=0)], axis=1)  # the last row has no weight
    got = prototypes.feature_ranges(leaves, feature_range)
    np.testing.assert_allclose(got, [4.0 / 2.0, 2.0 / 0.5, 1.0])
    huge = prototypes.feature_ranges(leaves, np.array([[-1e308, 0.0, 5.0], [1e308, 1.0, 5.0]]).T)
    assert np.isfinite(huge).all() and huge[0] > 0  # clipped like the standardised inputs


def test_only_leaves_with_enough_training_rows_are_prototypes(wine_deep, wine):
    X_tr, _, _, _ = wine
    fired = wine_deep.tree_.training_firing(X_tr)
    support = np.array([fired.phi0[fired.start[o]:fired.start[o] + fired.count[o]].sum()
                        for o in wine_deep.leaf_gaussians_.leaves])
    assert (support < MIN_SUPPORT).any()  # the test means something: some leaves are left out
    np.testing.assert_array_equal(wine_deep.rule_prototypes_.index, np.flatnonzero(support >= MIN_SUPPORT))


def test_a_training_input_at_a_prototype_has_distance_zero(wine_deep):
    leaves = wine_deep.leaf_gaussians_
    centre = leaves.mean[wine_deep.rule_prototypes_.index[0]]
    x = centre * leaves.scale + leaves.center
    assert ablation_score(wine_deep, x[None], "prototype")[0] == pytest.approx(0.0, abs=1e-9)


def test_tail_nats_counts_the_reference_scores_at_or_above():
    ref = np.array([1.0, 2.0, 3.0])
    got = tail_nats(ref, np.array([0.0, 2.0, 3.0]))
    np.testing.assert_allclose(got, [0.0, np.log(4 / 3), np.log(2)])
    above = tail_nats(ref, np.array([3.0 + 1e-6, 4.0, 50.0]))
    assert tail_nats(ref, np.array([3.0 * (1 + 1e-12)]))[0] == pytest.approx(np.log(2))  # round-off
    assert above[0] == pytest.approx(np.log(4))
    assert np.log(4) < above[1] < above[2] < np.inf  # keeps ranking above the largest reference


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=30),
       st.lists(st.floats(-1e300, 1e300), min_size=1, max_size=30))
@example(ref=[-5e-324], scores=[0.0])  # a subnormal reference: lambda came out negative, nats -inf
def test_tail_nats_is_finite_non_negative_and_non_decreasing(ref, scores):
    ref, scores = np.sort(np.array(ref)), np.sort(np.array(scores))
    nats = tail_nats(ref, scores)
    assert np.isfinite(nats).all() and (nats >= 0).all()
    assert (np.diff(nats) >= -1e-12).all()
    below = ref.size - np.searchsorted(ref, scores - 1e-9 * np.maximum(np.abs(scores), 1.0))
    inside = scores <= ref[-1]
    np.testing.assert_allclose(nats[inside], (np.log(ref.size + 1) - np.log1p(below))[inside],
                               rtol=1e-12, atol=1e-12)


def test_typical_is_the_sum_of_the_two_tails(wine_deep, wine):
    _, X_te, _, _ = wine
    Z = X_te + 0.2
    leaf_ref, distance_ref = wine_deep.rule_prototypes_.reference
    expected = (tail_nats(leaf_ref, ablation_score(wine_deep, Z, "leaf"))
                + tail_nats(distance_ref, ablation_score(wine_deep, Z, "prototype")))
    np.testing.assert_allclose(wine_deep.ood_score(Z, "typical"), expected, rtol=1e-12)
    out = wine_deep.credal_readout(Z, "typical")
    np.testing.assert_array_equal(out.ood_score, wine_deep.ood_score(Z, "typical"))


def test_the_reference_holds_the_training_rows_in_sample_scores(wine_deep, wine):
    X_tr, _, _, _ = wine
    leaf_ref, distance_ref = wine_deep.rule_prototypes_.reference
    np.testing.assert_allclose(leaf_ref, np.sort(ablation_score(wine_deep, X_tr, "leaf")), rtol=1e-12)
    distance = ablation_score(wine_deep, X_tr, "prototype")
    np.testing.assert_allclose(distance_ref, np.sort(distance), rtol=1e-12)


def test_the_reference_is_a_deterministic_subsample_of_the_positive_weight_rows(monkeypatch):
    monkeypatch.setattr(scores, "REFERENCE_ROWS", 10)
    sw = np.ones(25)
    sw[3] = 0.0
    rows = scores.reference_rows(sw)
    assert rows.size == 10 and 3 not in rows and rows[0] == 0 and rows[-1] == 24
    np.testing.assert_array_equal(rows, scores.reference_rows(sw))


def _flipped_profiles(rng, profiles, n, p_flip):
    """Near-binary concept vectors: each class's profile with a fraction of flips and noise."""
    c = rng.integers(len(profiles), size=n)
    X = profiles[c].astype(float)
    flip = rng.random(X.shape) < p_flip
    X[flip] = 1 - X[flip]
    return np.clip(X + rng.normal(0, 0.03, X.shape), 0, 1), c


def test_typical_finds_a_novel_concept_profile_better_than_the_leaf_score():
    """Near-binary concepts (the synthetic world's shape, beyond the paper): a novel class is a new
    profile 3 attributes from its nearest seen class; a seen image flips an attribute now and then."""
    rng = np.random.default_rng(0)
    seen = rng.integers(0, 2, size=(8, 16))
    novel = seen[:2].copy()
    novel[:, :3] = 1 - novel[:, :3]
    X, y = _flipped_profiles(rng, seen, 1600, 0.03)
    clf = FERLClassifier("deep", random_state=0).fit(X, y)
    X_id, _ = _flipped_profiles(rng, seen, 400, 0.03)
    X_ood, _ = _flipped_profiles(rng, novel, 400, 0.03)
    auroc = {k: ood_auroc(ferl_score(clf, X_id, k), ferl_score(clf, X_ood, k)) for k in ("leaf", "typical")}
    assert auroc["typical"] > auroc["leaf"]
    assert auroc["typical"] > 0.9


def test_a_novelty_analysed_without_prototypes_refuses_their_kinds(wine_deep, wine):
    _, X_te, _, _ = wine
    novelty = analyse(wine_deep.tree_, wine_deep.leaf_gaussians_, X_te,
                      wine_deep.tree_.sparse_firing(X_te, True, wine_deep._gate_margin()))
    for kind in ("typical", "prototype"):
        with pytest.raises(ValueError, match="needs the rule prototypes"):
            novelty.score(kind)


def test_typical_splits_over_the_features_and_is_the_default(wine_deep, wine):
    _, X_te, _, _ = wine
    Z = np.vstack([X_te, X_te[:5] + 0.4])
    novelty = wine_deep._novelty(Z)
    typical = wine_deep.ood_score(Z)
    np.testing.assert_allclose(typical, wine_deep.ood_score(Z, "typical"), rtol=0)
    for kind in ("typical", "prototype"):
        parts = novelty.feature_scores(kind)
        assert (parts >= 0).all()
        np.testing.assert_allclose(parts.sum(axis=1), ferl_score(wine_deep, Z, kind), rtol=1e-9)
    ranked = wine_deep.anomalous_features(Z, None)
    np.testing.assert_allclose([sum(a.score for a in r) for r in ranked], typical, rtol=1e-9)
    # t_D is shared out like the prototype deviations, t_leaf like the leaf score
    P = wine_deep.rule_prototypes_
    parts = prototype_distance(Z, wine_deep.leaf_gaussians_, P.index, P.unit)[0]
    leaf = novelty.feature_scores("leaf")
    t_leaf, t_d = novelty.tails.T
    assert (t_d > 0).sum() > len(Z) // 2
    expected = (t_leaf[:, None] * leaf / leaf.sum(axis=1, keepdims=True)
                + t_d[:, None] * parts / parts.sum(axis=1, keepdims=True))
    np.testing.assert_allclose(novelty.feature_scores("typical"), expected, rtol=1e-9, atol=1e-12)


def test_the_same_seed_gives_the_same_prototypes(wine):
    X_tr, _, y_tr, _ = wine
    a, b = (FERLClassifier("deep", random_state=3).fit(X_tr, y_tr) for _ in range(2))
    np.testing.assert_array_equal(a.rule_prototypes_.index, b.rule_prototypes_.index)
    np.testing.assert_array_equal(a.rule_prototypes_.reference, b.rule_prototypes_.reference)


def test_save_load_keeps_the_prototypes(tmp_path, wine_deep, wine):
    _, X_te, _, _ = wine
    wine_deep.save(tmp_path / "m")
    back = FERLClassifier.load(tmp_path / "m")
    for kind in ("typical", "prototype"):
        np.testing.assert_array_equal(ferl_score(back, X_te + 0.3, kind),
                                      ferl_score(wine_deep, X_te + 0.3, kind))


def _resaved(tmp_path, model, edit):
    model.save(tmp_path / "m")
    meta, arrays = persist.read_model(tmp_path / "m")
    edit(arrays)
    meta = {k: v for k, v in meta.items() if k not in ("schema_version", "npz_sha256")}
    persist.write_model(tmp_path / "edited", meta, arrays)
    return tmp_path / "edited"


@pytest.mark.parametrize("edit, message", [
    (lambda a: a.pop("prototype_index"), r"lacks the rule prototype arrays \['prototype_index'\].*refit"),
    (lambda a: a.__setitem__("prototype_index", a["prototype_index"][::-1].copy()), "prototype index"),
    (lambda a: a.__setitem__("prototype_index", a["prototype_index"] + 10_000), "prototype index"),
    (lambda a: a.__setitem__("prototype_reference", a["prototype_reference"][:, ::-1].copy()),
     "prototype reference"),
    (lambda a: a["prototype_reference"].__setitem__((0, 0), np.nan), "prototype reference"),
    (lambda a: a.__setitem__("prototype_reference", a["prototype_reference"] - 100.0), "prototype reference"),
    (lambda a: a.pop("prototype_unit"), r"lacks the rule prototype arrays \['prototype_unit'\].*refit"),
    (lambda a: a["prototype_unit"].__setitem__(0, 0.0), "prototype unit"),
    (lambda a: a["prototype_unit"].__setitem__(0, np.inf), "prototype unit"),
    # below 1 (fit gives >= 2 or 1): 5e-324 made the distances NaN, and tail_nats crashed on them
    (lambda a: a["prototype_unit"].__setitem__(0, 5e-324), "prototype unit"),
    (lambda a: a["prototype_unit"].__setitem__(0, 0.5), "prototype unit"),
    (lambda a: a.__setitem__("prototype_unit", a["prototype_unit"][:-1].copy()), "prototype unit"),
])
def test_loading_refuses_missing_or_edited_prototypes(tmp_path, wine_deep, edit, message):
    with pytest.raises(ValueError, match=message):
        FERLClassifier.load(_resaved(tmp_path, wine_deep, edit))


def test_fitting_a_dataframe_gives_no_feature_name_warning(wine):
    """The reference's in-sample "leaf" scores are read out from the validated ndarray: going
    through ``ood_score`` warned that it lacked the DataFrame's feature names."""
    pd = pytest.importorskip("pandas")
    X_tr, _, y_tr, _ = wine
    frame = pd.DataFrame(X_tr, columns=[f"c{i}" for i in range(X_tr.shape[1])])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        clf = FERLClassifier("compact", random_state=0).fit(frame, y_tr)
        scores = clf.ood_score(frame)
    plain = FERLClassifier("compact", random_state=0).fit(X_tr, y_tr)
    np.testing.assert_array_equal(clf.rule_prototypes_.reference, plain.rule_prototypes_.reference)
    np.testing.assert_array_equal(scores, plain.ood_score(X_tr))


def test_tail_nats_keeps_ranking_above_a_reference_near_the_float_maximum():
    """``lambda = max ref - median ref``: the median of two scores above half the float maximum
    overflowed to inf, making ``lambda`` -inf and the continuation above the reference flat."""
    ref = np.array([0.0, 1e308, 1.2e308, 1.4e308])
    nats = tail_nats(ref, np.array([1.5e308, 1.7e308]))
    assert np.isfinite(nats).all() and np.log(5) < nats[0] < nats[1]


@pytest.mark.parametrize("other, far", [(0.0, 1e40), (3e7, 3e7 + 1)])
def test_the_nearest_prototype_is_exact_where_float32_cannot_tell_the_prototypes_apart(other, far):
    """Prototype means past float32's range (inf there) or closer than its resolution (2 at 3e7):
    the float32 search took the first prototype, at ``other``, over the one at the input."""
    leaves = SimpleNamespace(center=np.zeros(2), scale=np.ones(2), mean=np.array([[other, 0.0], [far, 0.0]]))
    X = np.array([[far, 0.0], [far, 0.25]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        distance, nearest = nearest_prototype(X, leaves, np.array([0, 1]), np.ones(2))
    np.testing.assert_array_equal(nearest, [1, 1])
    np.testing.assert_array_equal(distance, [0.0, 0.25])



def test_tail_nats_of_an_infinite_or_nan_score_does_not_read_out_of_bounds():
    """``s - 1e-9 |s|`` is NaN for ``s = inf``, and NaN's cell ``int(NaN)`` indexed out of bounds:
    the interpreter died (bus error), as it did on a loaded model whose hand-edited unit made the
    distances NaN."""
    ref = np.sort(np.random.default_rng(0).normal(size=50))
    nats = tail_nats(ref, np.array([np.inf, np.nan, -np.inf, 1e308]))
    assert np.isfinite(nats[[0, 2, 3]]).all() and nats[0] > nats[3] > np.log(51) and nats[2] == 0
    assert np.isnan(nats[1])

@pytest.mark.parametrize("huge", [1e300, np.finfo(np.float64).max])
def test_rows_of_weight_zero_holding_huge_values_change_neither_the_unit_nor_the_scores(huge):
    """Their weight 0 times an overflowed square (inf) was NaN in the standardisation's and the free
    Gaussians' sums: fit raised ("standardise needs ... a finite, positive scale")."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 4))
    y = (X[:, 0] > 0).astype(int)
    Z = np.array([[huge, -huge, 0.5, 0.0], [-huge, huge, 0.0, -huge]])
    sw = np.r_[np.ones(40), 0.0, 0.0, np.ones(40)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a = FERLClassifier("compact", random_state=0).fit(np.vstack([X[:40], Z, X[40:]]),
                                                          np.r_[y[:40], 0, 1, y[40:]], sample_weight=sw)
    b = FERLClassifier("compact", random_state=0).fit(X, y)
    np.testing.assert_array_equal(a.rule_prototypes_.unit, b.rule_prototypes_.unit)
    probe = np.vstack([X[:5], Z])
    for kind in ("typical", "prototype", "leaf", "residual"):
        np.testing.assert_array_equal(ferl_score(a, probe, kind), ferl_score(b, probe, kind))
