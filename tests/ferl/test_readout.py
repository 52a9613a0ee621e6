"""Sparse firing and the shared read-out: parity with slow references, chunks, input fast path."""

import warnings

import numpy as np
import pytest
from sklearn.datasets import make_classification

import ferl.readout.batch as readout
from ferl import FERLClassifier
from ferl.benchmarks.ood_kinds import ablation_score
from ferl.tree.firing import Firing, Scratch
from ferl.tree.membership import trapezoid


def _fit(variant="deep", seed=0, **params):
    X, y = make_classification(n_samples=400, n_features=5, n_informative=3, n_classes=3,
                               random_state=seed)
    return FERLClassifier(variant, random_state=seed, **params).fit(X, y), X


def _reference(tree, x, margin, gates):
    """Per node: gated firing, ungated firing and gate loss of one sample (appendix A.2, eq. 8)."""
    phi, phi0, lost = np.zeros(tree.n_nodes), np.zeros(tree.n_nodes), np.zeros(tree.n_nodes)
    phi[0] = phi0[0] = 1.0
    for o in range(tree.n_nodes):
        f = tree.feature[o]
        if f < 0:
            continue
        v, p = x[f], phi[o]
        if gates:
            lo, hi = tree.lo[o], tree.hi[o]
            g = 1.0 if lo <= v <= hi else max(0.0, 1.0 - max(lo - v, v - hi) / margin[o])
            lost[o], p = p * (1.0 - g), p * g
        m = trapezoid(v, *tree.trap[o])
        phi[tree.left[o]], phi[tree.right[o]] = p * m, p * (1.0 - m)
        phi0[tree.left[o]], phi0[tree.right[o]] = phi0[o] * m, phi0[o] * (1.0 - m)
    return phi, phi0, lost


@pytest.mark.parametrize("variant", ["compact", "deep"])
@pytest.mark.parametrize("gates", [True, False])
def test_sparse_firing_matches_the_reference_inside_and_outside_the_support(variant, gates):
    clf, X = _fit(variant)
    rng = np.random.default_rng(1)
    Z = np.vstack([X[:40], rng.normal(scale=4.0, size=(40, X.shape[1]))])
    margin = clf._gate_margin()
    fired = clf.tree_.sparse_firing(Z, gates, margin)
    phi, phi0, lost = (fired.dense(v) for v in (fired.phi, fired.phi0, fired.lost))
    for i, z in enumerate(Z):
        ref = _reference(clf.tree_, z, margin, gates)
        np.testing.assert_allclose(phi[i], ref[0], rtol=0, atol=1e-15)
        np.testing.assert_allclose(phi0[i], ref[1], rtol=0, atol=1e-15)
        np.testing.assert_allclose(lost[i], ref[2], rtol=0, atol=1e-15)
    assert fired.count.sum() == (np.vstack([_reference(clf.tree_, z, margin, gates)[1]
                                            for z in Z]) > 0).sum()  # no zero entry kept


def test_sparse_firing_grows_when_samples_reach_more_nodes_than_first_guessed():
    clf, X = _fit("deep")
    tree = clf.tree_
    internal = tree.feature >= 0
    tree.trap = tree.trap.copy()
    tree.trap[internal, 2], tree.trap[internal, 3] = -1e6, 1e6  # every band covers the data
    assert tree.n_nodes > 30
    fired = tree.sparse_firing(X, False, clf._gate_margin())
    assert fired.count.sum() == X.shape[0] * tree.n_nodes  # every sample reaches every node
    leaves = tree.is_leaf
    np.testing.assert_allclose(fired.dense(fired.phi)[:, leaves].sum(axis=1), 1.0, atol=1e-12)


def test_firing_from_dense_round_trips():
    phi = np.array([[1.0, 0.0, 0.25], [1.0, 0.5, 0.0]])
    fired = Firing.from_dense(phi)
    np.testing.assert_array_equal(fired.dense(fired.phi), phi)
    np.testing.assert_array_equal(fired.count, [2, 1, 1])


@pytest.mark.parametrize("combination", ["dempster", "cautious"])
def test_chunked_read_out_equals_one_pass(monkeypatch, combination):
    clf, X = _fit("deep", combination=combination)
    Z = np.vstack([X, X[:50] * 3.0])
    whole = clf._read(Z, novelty=True, score="nll")
    monkeypatch.setattr(readout, "CHUNK", 7)
    parts = clf._read(Z, novelty=True, score="nll")
    for name in ("mass", "ignorance", "conflict"):
        np.testing.assert_array_equal(getattr(parts.evidence, name), getattr(whole.evidence, name))
    for name in ("routing_loss", "feature_anomaly", "residual", "firing"):
        np.testing.assert_array_equal(getattr(parts.novelty, name), getattr(whole.novelty, name))
    # a leaf's rows are whitened in one BLAS product or row by row as the chunk holds them
    np.testing.assert_allclose(parts.score, whole.score, rtol=1e-13)


def test_sparse_firing_grows_its_scratch_and_reuses_it():
    clf, X = _fit("deep")
    tree, margin = clf.tree_, clf._gate_margin()
    batches = (X, X[:5] * 2.0, X[::-1])
    fresh = [tree.sparse_firing(batch, True, margin) for batch in batches]
    small = len(X) + 2  # room for the root's entries only: the first batch must grow it
    scratch = Scratch(np.zeros(small, dtype=np.int64), np.zeros(small), np.zeros(small), np.zeros(small))
    for batch, expected in zip(batches, fresh, strict=True):
        got = tree.sparse_firing(batch, True, margin, scratch)
        np.testing.assert_array_equal(got.start, expected.start)
        np.testing.assert_array_equal(got.count, expected.count)
        at = expected.entries()[0]  # the slots between nodes hold whatever the buffer held
        for name in ("rows", "phi", "phi0", "lost"):
            np.testing.assert_array_equal(getattr(got, name)[at], getattr(expected, name)[at], err_msg=name)
        assert np.shares_memory(got.phi0, scratch.phi0)
    assert scratch.rows.size > small
    grown = scratch.rows
    tree.sparse_firing(X[:5], True, margin, scratch)
    assert scratch.rows is grown  # a smaller batch is written into the grown buffers


def test_fast_input_path_gives_what_validation_gives():
    clf, X = _fit("deep")
    Z = X[:30]
    expected = clf.predict_proba(Z)
    for same in (Z.tolist(), np.asfortranarray(Z), Z[::1, :]):
        np.testing.assert_allclose(clf.predict_proba(same), expected, rtol=1e-12)
    bad = Z.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        clf.predict_proba(bad)
    with pytest.raises(ValueError, match="features"):
        clf.predict_proba(Z[:, :3])


def test_finite_inputs_whose_sum_is_undefined_give_no_warning():
    clf, X = _fit("deep")
    Z = X[:4].copy()
    Z[0], Z[1] = 1.7e308, -1.7e308  # finite, but their sum is inf - inf = NaN
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # was "RuntimeWarning: invalid value encountered in reduce"
        proba = clf.predict_proba(Z)
    np.testing.assert_array_equal(proba, clf.predict_proba(np.asfortranarray(Z)))  # validated path


def test_margins_follow_parameters_changed_after_fit():
    clf, X = _fit("deep")
    far = X[:20] * 2.0 + 1.0
    before = ablation_score(clf, far, "firing")
    clf.set_params(support_margin=5.0)
    after = ablation_score(clf, far, "firing")
    assert after.sum() < before.sum()  # wider margins lose less routing mass
    clf.set_params(support_margin=1.0)
    np.testing.assert_array_equal(ablation_score(clf, far, "firing"), before)


@pytest.mark.parametrize("kind", [["nll"], np.array(["nll"]), "NLL"])
def test_an_ood_kind_that_is_not_one_of_the_kinds_is_refused(kind):
    clf, X = _fit("compact")
    for call in (clf.ood_score, clf.credal_readout):
        with pytest.raises(ValueError, match="unknown OOD score kind"):
            call(X[:3], kind)  # an array holding "nll" was read as "nll"


def test_no_kind_means_the_models_own_kind_never_no_score():
    clf, X = _fit("compact")  # None once returned None (ood_score) / a read-out without a score
    np.testing.assert_array_equal(clf.ood_score(X[:3], None), clf.ood_score(X[:3], "typical"))
    np.testing.assert_array_equal(clf.credal_readout(X[:3]).ood_score, clf.ood_score(X[:3], "typical"))


@pytest.mark.parametrize("name, value", [("novelty_discount", "no"), ("bounded_support", "no"),
                                         ("support_margin", -1.0), ("min_width", 0.0),
                                         ("evidence_nodes", "foo")])
def test_read_out_parameters_set_after_fit_are_checked(name, value):
    clf, X = _fit("compact")
    before = clf.predict_proba(X[:5])
    clf.set_params(**{name: value})
    for call in (clf.predict_proba, clf.credal_readout, clf.ood_score):
        with pytest.raises(ValueError, match=f"The '{name}' parameter of FERLClassifier must be"):
            call(X[:5])  # they were read as they came: "no" switched the discount on, "foo" gave all nodes
    clf.set_params(**{name: FERLClassifier().get_params()[name]})
    np.testing.assert_array_equal(clf.predict_proba(X[:5]), before)


def _outputs(clf, X):
    """Every array a read-out returns: credal set, evidence, scores and the per-feature novelty."""
    out = clf.credal_readout(X)
    novelty = clf._novelty(clf._check_X(X))
    arrays = [out.credal_set, out.evidence.mass, out.evidence.ignorance, out.evidence.conflict,
              out.ood_score] + [getattr(novelty, name) for name in vars(novelty)]
    return [a for a in arrays if isinstance(a, np.ndarray)]


@pytest.mark.parametrize("discount", [False, True])
def test_a_thread_kept_scratch_leaves_earlier_outputs_alone(monkeypatch, discount):
    # the entry buffers outlive a read-out (`thread_scratch`), so no output may be a view of them
    monkeypatch.setattr(readout, "CHUNK", 64)
    clf, X = _fit(novelty_discount=discount)
    for rows in (X[:50], X[:300]):  # one chunk (the output is the chunk's), then several
        first = _outputs(clf, rows)
        kept = [a.copy() for a in first]
        _outputs(clf, X[::-1] + 0.5)
        for a, b in zip(first, kept, strict=True):
            np.testing.assert_array_equal(a, b)


def test_read_outs_in_threads_match_sequential_ones():
    from concurrent.futures import ThreadPoolExecutor

    clf, X = _fit()
    batches = [X[i::4] + 0.1 * i for i in range(4)]
    sequential = [clf.credal_readout(b) for b in batches]
    with ThreadPoolExecutor(4) as pool:
        threaded = list(pool.map(clf.credal_readout, batches * 3))
    for got, want in zip(threaded, sequential * 3, strict=True):
        np.testing.assert_array_equal(got.evidence.mass, want.evidence.mass)
        np.testing.assert_array_equal(got.ood_score, want.ood_score)
    assert readout.thread_scratch() is readout.thread_scratch()


def test_dense_firing_of_some_nodes_is_the_columns_of_the_full_matrix():
    rng = np.random.default_rng(0)
    phi = np.where(rng.random((7, 5)) < 0.5, rng.random((7, 5)), 0.0)
    phi[:, 3] = 0.0  # a node that never fires
    fired = Firing.from_dense(phi)
    for mask in (np.array([True, False, True, True, False]), np.zeros(5, bool), np.ones(5, bool)):
        np.testing.assert_array_equal(fired.dense(fired.phi, mask), phi[:, mask])


@pytest.mark.parametrize("mask", [np.array([1, 0, 1, 0, 0]), np.ones(6, bool), np.ones(4, bool),
                                  [True, False, True, False, False]])
def test_dense_firing_refuses_a_mask_that_is_not_one_bool_per_node(mask):
    """An int 0/1 mask read as column indices, or a mask one too long, gave wrong columns silently."""
    fired = Firing.from_dense(np.eye(5))
    with pytest.raises(ValueError, match="bool mask of shape \\(5,\\)"):
        fired.dense(fired.phi, mask)
