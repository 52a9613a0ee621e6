"""Leaf Gaussians (`ferl.novelty.leaf_gaussians`) and the novelty discount of the evidence
(`novelty_discount`)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.datasets import make_classification

from ferl import FERLClassifier
from ferl.benchmarks.ood_kinds import ablation_score
from ferl.evidence import combine, discount
from ferl.novelty.cross_fit import CROSS_FIT
from ferl.novelty.discount import leaf_typicality
from ferl.novelty.free_gaussians import VAR_FLOOR
from ferl.novelty.leaf_gaussians import KAPPA, RELIABILITY_QUANTILES, RIDGE, SUPPORT, leaf_terms
from ferl.novelty.linalg import Z_MAX, standardise


def _correlated(seed, n):
    """Classes set by x0 and x3; x2 follows x1 closely in every class (a correlation the tree
    does not need for the classes)."""
    rng = np.random.default_rng(seed)
    x0, x1, x3 = rng.random(n), rng.random(n), rng.random(n)
    X = np.column_stack([x0, x1, x1 + 0.03 * rng.normal(size=n), x3])
    return X, (x0 > 0.5).astype(int) + (x3 > 0.5)


@pytest.fixture(scope="module")
def correlated():
    X, y = _correlated(0, 400)
    return FERLClassifier(random_state=0).fit(X, y), X, y


def _planted(seed, n):
    """Inputs of the retained distribution with the x1-x2 correlation broken, every value in range."""
    X, _ = _correlated(seed, n)
    X[:, 2] = 1.0 - X[:, 1]
    return X[np.abs(X[:, 2] - X[:, 1]) > 0.3]


# ---------------------------------------------------------------------- the leaf Gaussians
def _supported(t, phi0, d):
    """Leaves with correlations of their own: soft count at least ``SUPPORT * d``; both kinds occur."""
    own = t.is_leaf & (phi0.sum(axis=0) >= SUPPORT * d)
    assert own.any() and not own[t.is_leaf].all()
    return own


def _pooled(t, U, w):
    """The pooled within-leaf covariance: each leaf's weighted covariance about its own mean,
    averaged with the leaves' soft counts (``w`` (n, n_nodes) weights)."""
    leaves = [o for o in np.flatnonzero(t.is_leaf) if w[:, o].sum() > 0]
    return sum(w[:, o].sum() * np.cov(U.T, aweights=w[:, o], bias=True) for o in leaves) / w[:, leaves].sum()


def _leaf_cov(U, w, pooled, own):
    """A leaf's covariance (ridge added): shrunk to ``pooled`` with ``KAPPA d`` pseudo-counts; below
    ``SUPPORT d`` its variances with the pooled correlations."""
    d = U.shape[1]
    a = w.sum() / (w.sum() + KAPPA * d)
    C = a * np.cov(U.T, aweights=w, bias=True) + (1 - a) * pooled
    if own:
        return C + RIDGE * np.eye(d)
    P = pooled + RIDGE * np.eye(d)
    sd = np.sqrt(np.diag(C) + RIDGE)
    return P / np.sqrt(np.outer(np.diag(P), np.diag(P))) * np.outer(sd, sd)


def test_leaf_gaussians_match_a_numpy_reference():
    X, y = make_classification(n_samples=300, n_features=16, n_informative=3, n_classes=3, random_state=1)
    sw = np.random.default_rng(1).random(300) + 0.5
    clf = FERLClassifier(random_state=1).fit(X, y, sample_weight=sw)
    t, g = clf.tree_, clf.leaf_gaussians_
    d = X.shape[1]
    center = np.average(X, axis=0, weights=sw)
    scale = np.sqrt(np.average((X - center) ** 2, axis=0, weights=sw))
    np.testing.assert_allclose(g.center, center, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(g.scale, scale, rtol=1e-10)
    U = (X - center) / scale
    phi0 = t.firing(X, False, np.ones(t.n_nodes))[0] * (sw / sw.mean())[:, None]
    own, pooled = _supported(t, phi0, d), _pooled(t, U, phi0)
    for j, o in enumerate(g.leaves):
        np.testing.assert_allclose(g.mean[j], np.average(U, axis=0, weights=phi0[:, o]), atol=1e-9)
        np.testing.assert_allclose(g.cov[j], _leaf_cov(U, phi0[:, o], pooled, own[o]), atol=1e-9)
    Z = np.vstack([X[:10], X[:5] + 3.0])
    dev, spread, nll = leaf_terms(g, standardise(Z, g.center, g.scale), np.ones((len(Z), g.leaves.size)))
    for j in range(g.leaves.size):
        v = (Z - center) / scale - g.mean[j]
        d2 = np.einsum("if,fg,ig->i", v, np.linalg.inv(g.cov[j]), v)
        logdet = np.linalg.slogdet(g.cov[j] / RIDGE)[1]
        np.testing.assert_allclose(nll[:, j], d2 / 2 + logdet / 2, rtol=1e-9)
        assert g.half_share[j].sum() == pytest.approx(logdet / 2, rel=1e-9)
    assert (g.half_share >= 0).all()
    np.testing.assert_allclose((dev + spread).sum(axis=1), nll.sum(axis=1), rtol=1e-10)



def _path_residual(t, U, w, rows, leaf):
    """Numpy reference of ``R_l`` (`ferl.novelty.free_gaussians`): free-feature Gaussians weighted by ``w``
    (n, n_nodes), variance floored at VAR_FLOOR times the root's, averaged along ``leaf``'s path."""
    free = ~t.path_mask(U.shape[1])
    out, m, o = np.zeros(rows.sum()), 0, leaf
    root_var = np.cov(U.T, aweights=w[:, 0], bias=True).diagonal()
    floor = VAR_FLOOR * np.where(root_var > 0, root_var, 1.0)
    while True:
        if free[o].any():
            mu = np.average(U, axis=0, weights=w[:, o])
            var = np.maximum(np.average((U - mu) ** 2, axis=0, weights=w[:, o]), floor)
            out += (((U[rows] - mu) ** 2 / var)[:, free[o]]).mean(axis=1)
            m += 1
        if o == 0:
            return out / m
        o = t.parent[o]


def test_standardise_is_numpys_subtract_divide_and_clip_bit_for_bit():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 4)) * np.array([1.0, 1e-3, 1e150, 1.0])
    X[0] = [1e308, -1e308, 1e300, 5e-324]  # overflow to +-inf before the clip, and a subnormal
    center, scale = np.array([-1e308, 1e308, 0.5, 0.0]), np.array([1e-3, 0.5, 1e-200, 3.0])
    with np.errstate(over="ignore"):
        expected = np.clip((X - center) / scale, -Z_MAX, Z_MAX)
    got = standardise(X, center, scale)
    np.testing.assert_array_equal(got, expected)
    assert np.isfinite(got).all() and got.flags.c_contiguous
    with pytest.raises(ValueError, match="center and scale"):
        standardise(X, center[:3], scale)  # the compiled pass would read past its end


def test_standardise_refuses_a_zero_scale_and_names_the_shapes_it_was_given():
    X = np.ones((2, 3))
    for bad in (0.0, -1.0, np.nan, np.inf):
        # the compiled pass raised ZeroDivisionError at 0 (numpy gave inf, clipped); -1 / NaN / inf
        # would standardise silently wrong
        with pytest.raises(ValueError, match="scale"):
            standardise(X, np.zeros(3), np.array([1.0, bad, 1.0]))
    with pytest.raises(ValueError, match="finite center"):
        standardise(X, np.array([0.0, np.nan, 0.0]), np.ones(3))  # NaN out, silently
    with pytest.raises(ValueError, match=r"got \(2, 3\), \(\) and \(3,\)"):
        standardise(X, 0.0, np.ones(3))  # a scalar center is shape (), not (1,)


def test_the_reliability_reference_matches_a_numpy_cross_fit():
    """``(tau, lambda)`` from the leaf typicality ``nll_l / d + R_l / 2`` of every fold's rows under
    leaf and free-feature Gaussians refitted without it."""
    X, y = make_classification(n_samples=300, n_features=12, n_informative=3, n_redundant=0, n_classes=3,
                               random_state=2)
    sw = np.random.default_rng(2).random(300) + 0.5
    clf = FERLClassifier(random_state=2).fit(X, y, sample_weight=sw)
    t, g = clf.tree_, clf.leaf_gaussians_
    d = X.shape[1]
    U = standardise(X, g.center, g.scale)
    phi0 = t.firing(X, False, np.ones(t.n_nodes))[0] * (sw / sw.mean())[:, None]
    fold = np.arange(len(X)) % CROSS_FIT
    own = _supported(t, phi0, d)  # decided on all rows, the same in every fold
    values, weights = [], []
    for k in range(CROSS_FIT):
        keep = fold != k
        pooled = _pooled(t, U, phi0 * keep[:, None])
        for o in np.flatnonzero(t.is_leaf):
            w = phi0[:, o] * keep
            mu, C = np.average(U, axis=0, weights=w), _leaf_cov(U, w, pooled, own[o])
            test = (fold == k) & (phi0[:, o] > 0)
            v = U[test] - mu
            d2 = np.einsum("if,fg,ig->i", v, np.linalg.inv(C), v)
            nll = d2 / 2 + np.linalg.slogdet(C / RIDGE)[1] / 2
            values.append(nll / d + _path_residual(t, U, phi0 * keep[:, None], test, o) / 2)
            weights.append(phi0[test, o])
    values, weights = np.concatenate(values), np.concatenate(weights)
    order = np.argsort(values)
    cum = np.cumsum(weights[order])
    tau, half = (values[order][np.searchsorted(cum, q * cum[-1])] for q in RELIABILITY_QUANTILES)
    np.testing.assert_allclose(g.reliability, [tau, (half - tau) / np.log(2.0)], rtol=1e-9)


def test_leaf_typicality_adds_half_the_path_residual_to_the_nll_per_feature(correlated):
    """The discount's leaf score ``s_l = nll_l / d + R_l / 2``
    (`ferl.novelty.discount.leaf_typicality`), the
    residual taken over the leaf's path with the fitted free-feature Gaussians."""
    clf, X, _ = correlated
    Z = np.vstack([X[:50], _planted(3, 60)])
    t, g = clf.tree_, clf.leaf_gaussians_
    fired = t.sparse_firing(Z, False, np.ones(t.n_nodes))
    phi0 = fired.dense(fired.phi0)
    score = leaf_typicality(t, g, Z, fired)
    nll = leaf_terms(g, standardise(Z, g.center, g.scale), phi0[:, g.leaves])[2]
    free = ~np.isnan(t.free_var)
    floor = VAR_FLOOR * t.free_var[0]
    for j, leaf in enumerate(g.leaves):
        rows = phi0[:, leaf] > 0
        if not rows.any():
            continue
        path, o = [], leaf
        while True:
            path.append(o)
            if o == 0:
                break
            o = t.parent[o]
        r = [np.mean((Z[rows][:, free[o]] - t.free_mean[o, free[o]]) ** 2
                     / np.maximum(t.free_var[o, free[o]], floor[free[o]]), axis=1)
             for o in path if free[o].any()]
        np.testing.assert_allclose(score[rows, j], nll[rows, j] / Z.shape[1] + np.mean(r, axis=0) / 2,
                                   rtol=1e-9)
        assert (score[~rows, j] == 0).all()


@pytest.mark.parametrize("variant", ["compact", "deep"])
def test_rows_of_weight_zero_change_nothing_with_the_discount(variant):
    """The cross-fit folds went by row index, so zero-weight rows moved the others between folds
    and changed the reliability (masses differed by up to 0.17 from a fit without those rows)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 4))
    y = (X[:, 0] + 0.3 * rng.normal(size=80) > 0).astype(int)
    keep = np.arange(80) % 3 != 0
    probes = np.vstack([X[:10], X[:10] + 2.5])
    a = FERLClassifier(variant, novelty_discount=True, random_state=0).fit(X, y, sample_weight=keep * 1.0)
    b = FERLClassifier(variant, novelty_discount=True, random_state=0).fit(X[keep], y[keep])
    np.testing.assert_array_equal(a.leaf_gaussians_.reliability, b.leaf_gaussians_.reliability)
    np.testing.assert_allclose(a.evidence(probes).mass, b.evidence(probes).mass, rtol=0, atol=1e-12)


# ------------------------------------------- the per-source novelty discount ("rules")
def test_planted_near_ood_raises_ignorance_and_abstains_only_with_the_discount(correlated):
    clf, _, _ = correlated
    X_id, _ = _correlated(1, 300)
    X_near = _planted(2, 300)
    assert ablation_score(clf, X_near, "firing").mean() < 0.2  # mostly inside the gates' support
    off_id, off_near = clf.evidence(X_id), clf.evidence(X_near)
    clf.set_params(novelty_discount="rules")
    on_id, on_near = clf.evidence(X_id), clf.evidence(X_near)
    clf.set_params(novelty_discount=False)
    assert off_near.abstain.mean() < 0.5
    assert on_near.ignorance.mean() > 0.9 and on_near.abstain.mean() > 0.9
    # by design about 1 - q1 of typical inputs score beyond the q1 quantile, where r < 1/2
    typical = 1.0 - RELIABILITY_QUANTILES[1] + 0.01
    assert abs(on_id.ignorance.mean() - off_id.ignorance.mean()) < typical
    assert on_id.abstain.mean() - off_id.abstain.mean() < typical
    assert (on_id.ignorance >= off_id.ignorance - 1e-12).mean() == 1.0  # one source or agreeing ones
    rel = clf.set_params(novelty_discount="rules")._reliability(X_near)
    clf.set_params(novelty_discount=False)
    assert ((rel > 0) & (rel <= 1)).all()


def test_discount_off_is_the_papers_read_out_bit_for_bit(correlated):
    clf, X, y = correlated
    Z = np.vstack([X[:50], _planted(3, 100)])
    plain = FERLClassifier(random_state=0).fit(X, y)
    assert plain.novelty_discount is False
    on = FERLClassifier(random_state=0, novelty_discount="rules").fit(X, y)
    on.set_params(novelty_discount=False)
    for model in (plain, on):
        ev = model.evidence(Z)
        np.testing.assert_array_equal(ev.mass, clf.evidence(Z).mass)
        np.testing.assert_array_equal(ev.ignorance, clf.evidence(Z).ignorance)
        np.testing.assert_array_equal(model.predict_proba(Z), clf.predict_proba(Z))
    np.testing.assert_array_equal(on._reliability(Z), 1.0)


@pytest.mark.parametrize("variant", ["compact", "deep"])
def test_an_input_no_leaf_reaches_stays_vacuous_with_the_discount(variant, correlated):
    _, X, y = correlated
    clf = FERLClassifier(variant, random_state=0, novelty_discount="rules").fit(X, y)
    far = X[:3] + 10.0
    ev = clf.evidence(far)
    np.testing.assert_array_equal(ev.ignorance, 1.0)
    assert ev.abstain.all()
    np.testing.assert_allclose(clf.predict_proba(far), 1.0 / 3)


def test_all_node_evidence_discounts_internal_nodes_by_their_leaves(correlated):
    _, X, y = correlated
    clf = FERLClassifier("compact", random_state=0, novelty_discount="rules").fit(X, y)
    Z = np.vstack([X[:20], _planted(4, 40)])
    rel = clf._reliability(Z)
    phi0 = clf.tree_.firing(Z, False, clf._gate_margin())[0]
    t = clf.tree_
    for o in np.flatnonzero(~t.is_leaf):  # the phi0-weighted mean of its children's reliabilities
        kids = [t.left[o], t.right[o]]
        w = phi0[:, kids]
        expect = np.where(w.sum(1) > 0, (w * rel[:, kids]).sum(1) / np.maximum(w.sum(1), 1e-300), 1.0)
        np.testing.assert_allclose(rel[:, o], expect, rtol=1e-9, atol=1e-12)
    ev = clf.evidence(Z)
    np.testing.assert_allclose(ev.mass.sum(1) + ev.ignorance, 1.0)
    assert ev.ignorance[20:].mean() > ev.ignorance[:20].mean()


def test_explanation_shows_the_discount(correlated, tmp_path):
    clf, _, _ = correlated
    x = _planted(5, 50)[0]
    clf.set_params(novelty_discount="rules")
    try:
        e = clf.explain(x)
        ev = clf.evidence(x[None])
        assert e.ignorance == pytest.approx(ev.ignorance[0]) and e.abstain == bool(ev.abstain[0])
        assert e.sources and min(s.reliability for s in e.sources) < 0.5
        for s in e.sources:
            assert s.ignorance == pytest.approx(1 - s.reliability * s.firing)
            assert sum(s.mass) == pytest.approx(s.reliability * s.firing)
        assert "| reliability |" in e.to_markdown()
        clf.save(tmp_path / "m")
        back = FERLClassifier.load(tmp_path / "m")
        assert back.novelty_discount == "rules"
        np.testing.assert_array_equal(back.evidence(x[None]).ignorance, ev.ignorance)
    finally:
        clf.set_params(novelty_discount=False)


@pytest.mark.parametrize("variant", ["compact", "deep"])
def test_discounted_sparse_read_out_equals_the_dense_textbook_discount(variant, correlated):
    """`ferl.readout.batch.discounted` maps each sparse entry to its node's reliability: the batched
    evidence equals `combine` of the dense firings times the dense reliabilities."""
    _, X, y = correlated
    clf = FERLClassifier(variant, random_state=0, novelty_discount="rules").fit(X, y)
    Z = np.vstack([X[:40], _planted(6, 60), X[:5] + 0.4])
    phi = clf.tree_.firing(Z, True, clf._gate_margin())[0]
    expect = combine(discount(phi, clf._reliability(Z)), clf.tree_.value, clf._sources(), clf.combination)
    ev = clf.evidence(Z)
    np.testing.assert_allclose(ev.mass, expect.mass, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(ev.ignorance, expect.ignorance, rtol=1e-12, atol=1e-14)
    assert (clf._reliability(Z)[40:100] < 1).any()  # the discount did act


def test_the_leaf_read_out_is_the_same_row_by_row_and_in_blas_blocks(correlated):
    """`leaf_terms` whitens a leaf's rows in one BLAS product from `BLAS_ROWS` rows on, one by one
    below: both paths give the same terms."""
    from ferl.novelty.leaf_gaussians import _leaf_kernel

    clf, X, _ = correlated
    g = clf.leaf_gaussians_
    U = standardise(X[:60], g.center, g.scale)
    phi0 = clf.tree_.firing(X[:60], False, np.ones(clf.tree_.n_nodes))[0][:, g.leaves]
    args = (U, np.ascontiguousarray(phi0), g.mean, g.whiten_t, g.half_share, g.half_share.sum(axis=1))
    by_row, by_block = _leaf_kernel(*args, 10**9), _leaf_kernel(*args, 1)
    assert (phi0 > 0).sum(axis=0).max() >= 8  # some leaf takes the BLAS path by default
    for a, b in zip(by_row, by_block, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 300), variant=st.sampled_from(["compact", "medium", "deep"]),
       shift=st.sampled_from([0.0, 0.5, 3.0]))
def test_discounted_evidence_keeps_the_algebra_on_fitted_models(seed, variant, shift):
    """With the discount on: masses sum to 1, Bel <= BetP <= Pl, reliabilities in [0, 1], leaf
    typicality finite and >= 0, for inputs in and off the training distribution."""
    X, y = make_classification(n_samples=200, n_features=5, n_informative=3, n_redundant=1, n_classes=3,
                               random_state=seed)
    clf = FERLClassifier(variant, random_state=seed, novelty_discount=True).fit(X, y)
    rng = np.random.default_rng(seed)
    Z = np.vstack([X[:40], X[40:80] + shift * rng.normal(size=(40, X.shape[1])) * X.std(axis=0)])
    ev = clf.evidence(Z)
    np.testing.assert_allclose(ev.mass.sum(axis=1) + ev.ignorance, 1.0, atol=1e-12)
    assert (ev.belief <= ev.pignistic + 1e-12).all() and (ev.pignistic <= ev.plausibility + 1e-12).all()
    rel = clf._reliability(Z)
    assert ((rel >= 0) & (rel <= 1)).all()  # 0 where exp(-s / lambda) underflows: a vacuous source
    t, g = clf.tree_, clf.leaf_gaussians_
    score = leaf_typicality(t, g, Z, t.sparse_firing(Z, False, np.ones(t.n_nodes)))
    assert np.isfinite(score).all() and (score >= 0).all()


def test_small_leaves_share_the_pooled_correlations():
    """A leaf below ``SUPPORT d`` holds the pooled within-leaf correlations (so the whitening
    decomposes them once) with its own variances and mean."""
    X, y = make_classification(n_samples=400, n_features=16, n_informative=4, n_classes=4, random_state=4)
    clf = FERLClassifier(random_state=4).fit(X, y)
    t, g = clf.tree_, clf.leaf_gaussians_
    own = _supported(t, t.firing(X, False, np.ones(t.n_nodes))[0], X.shape[1])[g.leaves]
    corr = np.array([c / np.sqrt(np.outer(np.diag(c), np.diag(c))) for c in g.cov])
    np.testing.assert_allclose(corr[~own], np.broadcast_to(corr[~own][0], corr[~own].shape), atol=1e-12)
    assert not np.allclose(corr[own][0], corr[~own][0])
    assert len({m.tobytes() for m in g.mean}) == g.leaves.size
    assert len({np.diag(c).tobytes() for c in g.cov}) == g.leaves.size
    assert np.array_equal(g.cov, np.swapaxes(g.cov, 1, 2))  # exactly symmetric: saved as it is
