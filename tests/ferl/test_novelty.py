"""Novelty: bounded-support gates, routing loss (appendix eq. 8), free-feature Gaussians (eq. 3), OOD
scores and anomalous attributes (paper section 3.1, appendix C.2)."""


import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.datasets import load_wine, make_classification
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import MinMaxScaler

from ferl import FERLClassifier
from ferl.benchmarks.keel import default_data_root, load_keel
from ferl.benchmarks.ood import ferl_score
from ferl.benchmarks.ood_kinds import ablation_score
from ferl.metrics import ood_auroc
from ferl.novelty.free_gaussians import VAR_FLOOR
from ferl.novelty.ood_score import FIRING_EPS, LEAF_RESIDUAL, tail_nats
from ferl.novelty.scores import NAMING_DEPTH
from ferl.tree.fuzzy_tree import support_gate


def _fit(variant, seed, n=300, d=5):
    X, y = make_classification(n_samples=n, n_features=d, n_informative=3, n_classes=3,
                               random_state=seed)
    return FERLClassifier(variant, random_state=seed).fit(X, y), X, y


# ---------------------------------------------------------------------- gates and eq. 8
@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 500), variant=st.sampled_from(["compact", "medium", "deep"]),
       scale=st.sampled_from([0.5, 2.0, 6.0]))
def test_routing_loss_decomposes_the_lost_mass_exactly(seed, variant, scale):
    """Appendix eq. 8: 1 - sum of leaf firings = sum over features of the routing loss."""
    clf, X, _ = _fit(variant, seed)
    rng = np.random.default_rng(seed)
    Z = np.vstack([X[:50], rng.normal(scale=scale * X.std(), size=(100, X.shape[1]))])
    phi, lost = clf._firing(Z)
    loss = clf.routing_loss(Z)
    leaf_total = phi[:, clf.tree_.is_leaf].sum(axis=1)
    np.testing.assert_allclose(1.0 - leaf_total, loss.sum(axis=1), atol=1e-9)
    # per feature: the lost terms of the internal nodes splitting on it
    for f in range(Z.shape[1]):
        nodes = np.flatnonzero(clf.tree_.feature == f)
        np.testing.assert_allclose(loss[:, f], lost[:, nodes].sum(axis=1), atol=1e-12)
    assert (loss[:50].sum(axis=1) == 0).all()  # training inputs lie inside every range they reach
    if scale > 1:
        assert loss.sum() > 0
    clf.set_params(bounded_support=False)
    assert (clf.routing_loss(Z) == 0).all()


def test_gate_is_one_in_range_and_at_edges_linear_in_margin_zero_beyond():
    clf, X, _ = _fit("deep", 3)
    t = clf.tree_
    margin = clf._gate_margin()
    span = X.max(axis=0) - X.min(axis=0)
    for o in np.flatnonzero(~t.is_leaf):
        lo, hi, m = t.lo[o], t.hi[o], margin[o]
        assert m == pytest.approx(max(hi - lo, clf.min_width * span[t.feature[o]]))
        assert support_gate(lo, lo, hi, m) == 1.0 and support_gate(hi, lo, hi, m) == 1.0
        assert support_gate((lo + hi) / 2, lo, hi, m) == 1.0
        for frac in (0.01, 0.25, 0.5, 0.99):
            for x in (lo - frac * m, hi + frac * m):
                assert support_gate(x, lo, hi, m) == pytest.approx(1.0 - frac)
                assert 0.0 < support_gate(x, lo, hi, m) < 1.0
        assert support_gate(lo - m, lo, hi, m) == pytest.approx(0.0, abs=1e-12)
        assert support_gate(hi + m, lo, hi, m) == pytest.approx(0.0, abs=1e-12)
        for x in (lo - 1.01 * m, hi + 1.01 * m, hi + 3 * m):
            assert support_gate(x, lo, hi, m) == 0.0


def test_root_gate_scales_the_firing_and_can_be_switched_off_on_the_same_tree():
    X, y = make_classification(n_samples=300, n_features=4, random_state=1)
    clf = FERLClassifier("deep", max_rules=2, random_state=1).fit(X, y)  # one split: the root
    t = clf.tree_
    f, lo, hi = t.feature[0], t.lo[0], t.hi[0]
    m = clf._gate_margin()[0]
    assert m == pytest.approx(hi - lo)  # support_margin=1: one node-local range
    x = X[:4].copy()
    x[:, f] = [hi, lo - 0.25 * m, hi + 0.6 * m, hi + 2 * m]
    phi, _ = clf._firing(x)
    np.testing.assert_allclose(phi[:, t.is_leaf].sum(axis=1), [1.0, 0.75, 0.4, 0.0], atol=1e-12)
    np.testing.assert_allclose(clf.routing_loss(x)[:, f], [0.0, 0.25, 0.6, 1.0], atol=1e-12)
    proba_on = clf.predict_proba(x)
    clf.set_params(bounded_support=False)
    np.testing.assert_allclose(clf._firing(x)[0][:, t.is_leaf].sum(axis=1), 1.0)
    assert ablation_score(clf, x, "firing").max() == 0.0
    assert clf.predict_proba(x)[3].max() > 1.0 / 2  # off: the far input fires a leaf fully
    np.testing.assert_allclose(proba_on[3], 0.5)  # on: vacuous
    clf.set_params(bounded_support=True)
    np.testing.assert_array_equal(clf.predict_proba(x), proba_on)


@pytest.mark.parametrize("variant", ["compact", "deep"])
def test_input_no_leaf_reaches_gives_vacuous_mass_full_set_and_abstention(variant):
    clf, X, _ = _fit(variant, 5)
    far = X[:4] + 10 * (X.max(axis=0) - X.min(axis=0))
    phi, _ = clf._firing(far)
    assert (phi[:, clf.tree_.is_leaf] == 0).all()
    ev = clf.evidence(far)
    np.testing.assert_array_equal(ev.mass, 0.0)
    np.testing.assert_array_equal(ev.ignorance, 1.0)
    assert clf.predict_set(far).all() and ev.abstain.all()
    np.testing.assert_allclose(clf.predict_proba(far), 1.0 / 3)
    np.testing.assert_array_equal(ablation_score(clf, far, "firing"), 1.0)
    np.testing.assert_array_equal(ablation_score(clf, far, "ignorance"), 1.0)


# ---------------------------------------------------------------------- free-feature Gaussians
def test_free_gaussians_match_a_weighted_numpy_reference():
    clf, X, y = _fit("deep", 2)
    rng = np.random.default_rng(0)
    sw = rng.random(len(y)) + 0.5
    clf.fit(X, y, sample_weight=sw)
    t = clf.tree_
    phi, _ = clf._firing(X)
    path = t.path_mask(X.shape[1])
    for o in range(t.n_nodes):
        w = phi[:, o] * sw
        assert w.sum() == pytest.approx(t.weight[o], rel=1e-9)
        mean = np.average(X, axis=0, weights=w)
        var = np.average((X - mean) ** 2, axis=0, weights=w)
        np.testing.assert_array_equal(np.isnan(t.free_mean[o]), path[o])
        np.testing.assert_allclose(t.free_mean[o][~path[o]], mean[~path[o]], rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(t.free_var[o][~path[o]], var[~path[o]], rtol=1e-6, atol=1e-10)
    assert not path[0].any()  # every feature is free at the root


def _reference_anomaly(clf, x):
    """Slow eq. 3 score: ungated-firing-weighted mean over all nodes where the feature is free."""
    t = clf.tree_
    clf.set_params(bounded_support=False)
    phi0 = clf._firing(x[None])[0][0]
    clf.set_params(bounded_support=True)
    floor = VAR_FLOOR * np.where(t.free_var[0] > 0, t.free_var[0], 1.0)
    num, den = np.zeros(len(x)), np.zeros(len(x))
    res_num = res_den = 0.0
    for o in range(t.n_nodes):
        free = ~np.isnan(t.free_var[o])
        if phi0[o] == 0 or not free.any():
            continue
        z2 = np.where(free, (x - np.nan_to_num(t.free_mean[o])) ** 2
                      / np.maximum(np.nan_to_num(t.free_var[o], nan=1.0), floor), 0.0)
        num += phi0[o] * z2
        den += phi0[o] * free
        res_num += phi0[o] * z2[free].mean()
        res_den += phi0[o]
    return num / den, res_num / res_den


def test_feature_anomaly_and_residual_match_slow_reference(wine_deep, wine):
    _, X_te, _, _ = wine
    Z = np.vstack([X_te[:5], X_te[5:8] + 3.0])  # in and far out of range
    A = wine_deep.feature_anomaly(Z)
    R = ablation_score(wine_deep, Z, "residual")
    for i in range(len(Z)):
        a, r = _reference_anomaly(wine_deep, Z[i])
        np.testing.assert_allclose(A[i], a, rtol=1e-10)
        assert R[i] == pytest.approx(r, rel=1e-10)


def test_constant_features_give_finite_scores():
    rng = np.random.default_rng(0)
    X = rng.random((200, 3))
    y = (X[:, 0] > 0.5).astype(int)
    X = np.column_stack([X, np.full(200, 7.0), y * 2.0])  # constant overall / constant in every pure leaf
    clf = FERLClassifier("deep", min_width=1e-3, random_state=0).fit(X, y)  # crisp: pure leaves
    t = clf.tree_
    assert np.nanmin(t.free_var[t.is_leaf][:, 4]) == 0.0 and t.free_var[0, 3] == 0.0
    Z = np.vstack([X[:20], X[:5] + [0, 0, 0, 1.0, 0], X[:5] + [0, 0, 0, 0, 0.5]])
    residual = ablation_score(clf, Z, "residual")
    for scores in (clf.feature_anomaly(Z), clf.ood_score(Z)[:, None], residual[:, None]):
        assert np.isfinite(scores).all()
    A = clf.feature_anomaly(Z)
    assert (A[:20, 3] == 0).all()  # value equal to the constant: no anomaly
    assert (A[20:25, 3] > 10).all()  # 1 unit off a constant feature (floor variance VAR_FLOOR)
    assert [r[0].name for r in clf.anomalous_features(Z[20:25], top_k=1)] == ["x3"] * 5


def test_zero_weight_rows_do_not_change_the_gaussians(wine):
    X, _, y, _ = wine
    w = np.ones(len(y))
    w[::3] = 0
    a = FERLClassifier(random_state=0).fit(X, y, sample_weight=w)
    b = FERLClassifier(random_state=0).fit(X[w > 0], y[w > 0])
    np.testing.assert_allclose(a.tree_.free_mean, b.tree_.free_mean, rtol=1e-10)
    np.testing.assert_allclose(a.tree_.free_var, b.tree_.free_var, rtol=1e-8, atol=1e-14)


# ---------------------------------------------------------------------- scores and ranking
def test_ood_score_kinds_follow_their_formulas(wine_deep, wine):
    _, X_te, _, _ = wine
    Z = np.vstack([X_te, X_te[:10] + 0.8])
    nov = wine_deep._novelty(Z)
    residual = ablation_score(wine_deep, Z, "residual")
    firing = ablation_score(wine_deep, Z, "firing")
    np.testing.assert_allclose(residual, nov.residual_share.sum(axis=1))
    np.testing.assert_allclose(firing, wine_deep.routing_loss(Z).sum(axis=1))
    np.testing.assert_array_equal(ablation_score(wine_deep, Z, "ignorance"), wine_deep.evidence(Z).ignorance)
    firing_term = -np.log(FIRING_EPS + 1 - firing) + np.log1p(FIRING_EPS)
    combined = 0.5 * residual + firing_term
    np.testing.assert_allclose(ablation_score(wine_deep, Z, "combined"), combined, rtol=1e-12)
    leaf = (nov.deviation + nov.spread).sum(axis=1) / Z.shape[1]
    np.testing.assert_allclose(ablation_score(wine_deep, Z, "nll"), leaf + combined, rtol=1e-12)
    default = leaf + LEAF_RESIDUAL * residual + firing_term
    np.testing.assert_allclose(ablation_score(wine_deep, Z, "leaf"), default, rtol=1e-12)
    # as a term of "typical" the leaf score carries none of the paper's residual (ferl.novelty.scores)
    assert (residual > 0).all()
    np.testing.assert_allclose(ablation_score(wine_deep, Z, "leaf"), leaf + firing_term, rtol=1e-12)
    leaf_ref, distance_ref = wine_deep.rule_prototypes_.reference  # default: "typical"
    distance = ablation_score(wine_deep, Z, "prototype")
    typical = tail_nats(leaf_ref, default) + tail_nats(distance_ref, distance)
    np.testing.assert_allclose(wine_deep.ood_score(Z), typical, rtol=1e-12)
    assert (wine_deep.ood_score(Z) >= 0).all()
    assert wine_deep.ood_score(Z[-10:]).min() > np.median(wine_deep.ood_score(Z[:-10]))
    with pytest.raises(ValueError, match="unknown OOD score kind 'entropy'"):
        wine_deep.ood_score(Z, kind="entropy")


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 500), variant=st.sampled_from(["compact", "medium", "deep"]),
       scale=st.sampled_from([0.0, 1.0, 5.0]))
def test_feature_scores_are_an_exact_decomposition_of_their_score(seed, variant, scale):
    """Each ranked attribute's score is its part of the default score: the parts sum to it."""
    clf, X, _ = _fit(variant, seed)
    rng = np.random.default_rng(seed)
    Z = np.vstack([X[:30], X[30:60] + rng.normal(scale=scale * X.std(axis=0), size=(30, X.shape[1]))])
    nov = clf._novelty(Z)
    for kind in ("typical", "leaf", "nll", "combined", "residual", "prototype"):
        parts = nov.feature_scores(kind)
        assert (parts >= 0).all()
        np.testing.assert_allclose(parts.sum(axis=1), ferl_score(clf, Z, kind), rtol=1e-10, atol=1e-12)
    ranked = clf.anomalous_features(Z, top_k=None)
    np.testing.assert_allclose([sum(a.score for a in row) for row in ranked], clf.ood_score(Z),
                               rtol=1e-10)
    leaf = (nov.deviation + nov.spread).sum(axis=1) / Z.shape[1]  # T / d, shared like naming_share
    np.testing.assert_allclose(ablation_score(clf, Z, "nll"), ablation_score(clf, Z, "combined") + leaf,
                               rtol=1e-10)
    extra = nov.feature_scores("nll") - nov.feature_scores("combined")
    np.testing.assert_allclose(nov.feature_scores("leaf") - nov.feature_scores("nll"),
                               (LEAF_RESIDUAL - 0.5) * nov.residual_share, atol=1e-12)
    naming = nov.naming_share.sum(axis=1, keepdims=True)
    assert (naming > 0).all()
    np.testing.assert_allclose(extra, leaf[:, None] * nov.naming_share / naming, rtol=1e-8, atol=1e-12)
    with pytest.raises(ValueError, match="feature scores exist"):
        nov.feature_scores("firing")


def test_naming_share_is_the_residual_of_the_shallow_nodes(wine_deep, wine):
    """``naming_share`` (which apportions the leaf term of "nll") is ``residual_share`` computed over
    the nodes at depth <= NAMING_DEPTH only: a dense numpy reference of its definition."""
    _, X_te, _, _ = wine
    Z = np.vstack([X_te, X_te[:10] + 0.8])
    tree = wine_deep.tree_
    phi0 = tree.firing(Z, False, np.ones(tree.n_nodes))[0]
    free = ~np.isnan(tree.free_var)
    root_var = tree.free_var[0]
    var = np.maximum(np.where(free, tree.free_var, 1.0), VAR_FLOOR * np.where(root_var > 0, root_var, 1.0))
    mean = np.where(free, tree.free_mean, 0.0)
    z2 = np.where(free[None], (Z[:, None, :] - mean[None]) ** 2 / var[None], 0.0)
    n_free = free.sum(axis=1)
    nodes = (np.asarray(tree.depth) <= NAMING_DEPTH) & (n_free > 0)
    assert nodes.sum() > 1 and tree.depth.max() > NAMING_DEPTH  # deep nodes exist and are left out
    weight = phi0[:, nodes]
    expected = np.einsum("io,iof->if", weight, z2[:, nodes] / n_free[nodes][None, :, None])
    expected /= weight.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(wine_deep._novelty(Z).naming_share, expected, rtol=1e-10, atol=1e-14)


def test_planted_shift_of_an_unsplit_feature_is_ranked_first(wine):
    """Shift one unsplit feature of the test inputs by 4 training standard deviations.

    The default deep tree splits on all 13 wine features, so a smaller rule budget leaves some
    features unsplit; the read-out is the deep variant's (leaves-only evidence).
    """
    X_tr, X_te, y_tr, _ = wine
    wine_deep = FERLClassifier("deep", max_rules=12, random_state=0).fit(
        X_tr, y_tr, feature_names=load_wine().feature_names)
    used = set(wine_deep.tree_.feature[wine_deep.tree_.feature >= 0].tolist())
    unsplit = [f for f in range(X_tr.shape[1]) if f not in used]
    assert len(unsplit) >= 3
    names = wine_deep.feature_names_
    for f in unsplit:
        shifted = X_te.copy()
        shifted[:, f] += 4.0 * X_tr[:, f].std()
        top = [row[0].name for row in wine_deep.anomalous_features(shifted, top_k=1)]
        rate = np.mean(np.asarray(top) == names[f])
        assert rate >= 0.9, (names[f], rate)


def test_anomalous_features_structure_and_geometric_attribution(wine_deep, wine):
    _, X_te, _, _ = wine
    t = wine_deep.tree_
    f_root = int(t.feature[0])
    x = X_te[:4].copy()
    x[:, f_root] = t.hi[0] + 5 * wine_deep._gate_margin()[0]  # every path crosses the root gate
    ranked = wine_deep.anomalous_features(x, top_k=3)
    assert len(ranked) == 4 and all(len(r) == 3 for r in ranked)
    for row in ranked:
        assert row[0].feature == f_root and row[0].name == wine_deep.feature_names_[f_root]
        assert row[0].routing_loss == 1.0
        assert [a.score for a in row] == sorted((a.score for a in row), reverse=True)
    everything = wine_deep.anomalous_features(X_te[:2], top_k=None)
    assert sorted(a.name for a in everything[0]) == sorted(wine_deep.feature_names_)
    assert len(wine_deep.anomalous_features(X_te[:1], top_k=100)[0]) == X_te.shape[1]
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="top_k"):
            wine_deep.anomalous_features(X_te[:1], top_k=bad)


def test_leave_one_class_out_on_wine_is_detected():
    X, y = load_wine(return_X_y=True)
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.3, stratify=y, random_state=0)
    keep = y_tr != 2
    scaler = MinMaxScaler().fit(X_tr[keep])
    clf = FERLClassifier(random_state=0).fit(scaler.transform(X_tr[keep]), y_tr[keep])
    s_id = clf.ood_score(scaler.transform(X_te[y_te != 2]))
    s_ood = clf.ood_score(scaler.transform(X_te[y_te == 2]))
    assert ood_auroc(s_id, s_ood) >= 0.9


# ---------------------------------------------------------------------- geometric OOD (appendix C.2)
GEOMETRIC_SETS = ("wine", "glass", "vehicle")


@pytest.mark.parametrize("name", GEOMETRIC_SETS)
def test_geometric_ood_is_detected_by_firing_only_with_gates_on(name):
    root = default_data_root()
    path = root / f"{name}.dat" if root else None
    if path is None or not path.is_file():
        pytest.skip(f"KEEL data set {name} not available (set FERL_DATA_ROOT)")
    ds = load_keel(path)
    X_tr, X_te, y_tr, y_te = train_test_split(ds.X, ds.y, test_size=0.3, stratify=ds.y, random_state=0)
    scaler = MinMaxScaler().fit(X_tr)
    X_tr, X_te = scaler.transform(X_tr), scaler.transform(X_te)
    clf = FERLClassifier("deep", random_state=0).fit(X_tr, y_tr)
    rng = np.random.default_rng(0)
    beyond = 0.1 + 0.4 * rng.random(X_te.shape)  # every feature 0.1-0.5 ranges outside [0, 1]
    X_ood = np.where(rng.random(X_te.shape) < 0.5, -beyond, 1.0 + beyond)
    on = ood_auroc(ablation_score(clf, X_te, "firing"), ablation_score(clf, X_ood, "firing"))
    acc_on = np.mean(clf.predict(X_te) == y_te)
    clf.set_params(bounded_support=False)
    off = ood_auroc(ablation_score(clf, X_te, "firing"), ablation_score(clf, X_ood, "firing"))
    acc_off = np.mean(clf.predict(X_te) == y_te)
    assert on >= 0.95, on
    assert off <= 0.55, off
    assert abs(acc_on - acc_off) <= 1.0 / len(y_te) + 1e-12, (acc_on, acc_off)  # <= 1 sample


# ---------------------------------------------------------------------- finite on any scale
def test_a_feature_whose_variance_underflows_is_refused_by_name():
    """Reproducer: a feature scaled by 1e-160 gave inf / NaN ood_score; now fit refuses it."""
    X = np.random.default_rng(0).random((120, 4))
    y = (X[:, 0] > 0.5).astype(int)
    X[:, 2] *= 1e-160
    with pytest.raises(ValueError, match=r"feature\(s\) \['x2'\].*rescale X"):
        FERLClassifier(random_state=0).fit(X, y)



def test_a_row_holding_all_but_1e_150_of_the_weight_keeps_its_variances():
    """The weighted variance (~1e-149) is far above what float64 holds, but the mean's rounding
    error (~1e-17) outweighed it and the root variance cancelled to 0: fit blamed the scale of X."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    y = (X[:, 0] + 0.3 * rng.normal(size=60) > 0).astype(int)
    sw = np.where(np.arange(60) == 5, 1.0, 1e-150)
    clf = FERLClassifier("compact", random_state=0).fit(X, y, sample_weight=sw)
    expected = np.average((X - X[5]) ** 2, axis=0, weights=sw)  # the mean is X[5] to 1e-149
    np.testing.assert_allclose(clf.tree_.free_var[0], expected, rtol=1e-9)
    assert np.isfinite(clf.ood_score(X)).all()


@settings(max_examples=25, deadline=None)
@given(scales=st.lists(st.sampled_from([1e-150, 1e-100, 1e-20, 1.0, 1e20, 1e100, 1e150]),
                       min_size=3, max_size=3),
       probe=st.sampled_from([0.0, 1e-300, 1.0, -1e10, 1e100, 1e300, -1.7e308, 1.7e308]),
       seed=st.integers(0, 100))
def test_novelty_is_finite_on_every_input_a_fit_accepted(scales, probe, seed):
    rng = np.random.default_rng(seed)
    X = rng.random((80, 3)) * np.asarray(scales)
    y = (X[:, 0] > np.median(X[:, 0])).astype(int)
    try:
        clf = FERLClassifier(random_state=0).fit(X, y)
    except ValueError as err:  # only a variance float64 cannot hold, named
        assert "rescale X" in str(err)
        return
    with np.errstate(over="ignore"):
        Z = np.clip(np.vstack([X[:5], np.full((1, 3), probe), X[5:8] * [1.0, 1e200, 1.0]]), -1.7e308, 1.7e308)
    for kind in ("nll", "combined", "residual", "firing", "ignorance"):
        assert np.isfinite(ferl_score(clf, Z, kind)).all(), kind
    for row in clf.anomalous_features(Z, top_k=None):
        assert all(np.isfinite([a.score, a.deviation, a.anomaly, a.routing_loss]).all() for a in row)
    clf.set_params(novelty_discount=True)
    ev = clf.evidence(Z)
    assert np.isfinite(ev.mass).all() and np.isfinite(ev.ignorance).all()
