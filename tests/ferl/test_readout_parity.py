"""The totals-only OOD score and the one-pass credal read-out against the per-feature novelty they
replace in `ood_score` (`ferl.novelty.ood_score`, `ferl.novelty.leaf_gaussians`,
`FERLClassifier.credal_readout`)."""


import numpy as np
import pytest
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import MinMaxScaler

import ferl.novelty.leaf_gaussians as leaf_gaussians
from ferl import FERLClassifier
from ferl.benchmarks.keel import default_data_root, load_keel
from ferl.benchmarks.ood_kinds import ablation_score
from ferl.novelty.linalg import standardise
from ferl.novelty.ood_score import TOTAL_KINDS, score_totals
from ferl.novelty.scores import analyse
from ferl.readout.batch import read_out

TABULAR = default_data_root()
SETS = ["wine", "vowel", "ionosphere"]  # d = 13, 13, 33; 3, 11, 2 classes


@pytest.fixture(scope="module", params=SETS)
def keel(request):
    path = TABULAR / f"{request.param}.dat" if TABULAR else None
    if path is None or not path.is_file():
        pytest.skip(f"KEEL data set {request.param} not available")
    data = load_keel(path)
    X_tr, X_te, y_tr, _ = train_test_split(data.X, data.y, test_size=0.3, random_state=0, stratify=data.y)
    scaler = MinMaxScaler().fit(X_tr)
    X_te = scaler.transform(X_te)
    rng = np.random.default_rng(0)
    # held-out rows, rows shifted off the support (gates active), and rows far out
    Z = np.vstack([X_te, X_te[:20] + rng.normal(0.0, 0.3, (20, X_te.shape[1])), X_te[:5] * 50.0 - 20.0])
    return scaler.transform(X_tr), y_tr, np.ascontiguousarray(Z)


@pytest.mark.parametrize("variant", ["compact", "medium", "deep"])
@pytest.mark.parametrize("discount", [False, True])
def test_totals_equal_the_per_feature_scores_and_one_pass_equals_three_calls(keel, variant, discount):
    X, y, Z = keel
    clf = FERLClassifier(variant, novelty_discount=discount, random_state=0).fit(X, y)
    tree, leaves = clf.tree_, clf.leaf_gaussians_
    fired = tree.sparse_firing(Z, True, clf._gate_margin())
    novelty = analyse(tree, leaves, Z, fired)
    for kind in TOTAL_KINDS:
        expected = novelty.score(kind)
        got = score_totals(tree, leaves, Z, fired, kind)[0]
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-14, err_msg=kind)
        np.testing.assert_allclose(ablation_score(clf, Z, kind), expected, rtol=1e-12, atol=1e-14,
                                   err_msg=kind)
    assert (novelty.routing_loss.sum(axis=1) > 0).any()  # the gates are exercised
    # the discount reads the same leaf NLLs from either pass: the same evidence, bit for bit
    args = (tree, leaves, Z, True, clf._gate_margin(), clf._sources(), clf.combination)
    by_novelty = read_out(*args, novelty=True, novelty_discount=discount).evidence
    by_score = read_out(*args, novelty_discount=discount, score="leaf").evidence
    for name in ("mass", "ignorance", "conflict"):
        np.testing.assert_array_equal(getattr(by_score, name), getattr(by_novelty, name))
    for kind in ("typical",):
        out = clf.credal_readout(Z, kind)
        np.testing.assert_array_equal(out.credal_set, clf.predict_set(Z))
        np.testing.assert_array_equal(out.evidence.mass, clf.evidence(Z).mass)
        np.testing.assert_array_equal(out.evidence.ignorance, clf.evidence(Z).ignorance)
        np.testing.assert_array_equal(out.ood_score, clf.ood_score(Z, kind))
    for kind in ("ignorance", "leaf", "nll", "firing"):  # the ablation kinds share the evidence's pass too
        out = clf._read(Z, score=kind)
        np.testing.assert_array_equal(out.evidence.mass, clf.evidence(Z).mass)
        np.testing.assert_array_equal(out.score, ablation_score(clf, Z, kind))


@pytest.mark.parametrize("block", [1, 10**9])  # every leaf by BLAS, every leaf row by row
def test_leaf_totals_give_leaf_terms_nll_bit_for_bit(keel, block, monkeypatch):
    X, y, Z = keel
    clf = FERLClassifier("deep", random_state=0).fit(X, y)
    tree, g = clf.tree_, clf.leaf_gaussians_
    fired = tree.sparse_firing(Z, True, clf._gate_margin())
    monkeypatch.setattr(leaf_gaussians, "BLAS_ROWS", block)
    phi0 = fired.dense(fired.phi0)[:, g.leaves]
    U = standardise(Z, g.center, g.scale)
    deviation, spread, nll = leaf_gaussians.leaf_terms(g, U, phi0)
    total, nll_sparse = leaf_gaussians.leaf_totals(g, U, fired, want_nll=True)
    np.testing.assert_array_equal(nll_sparse, nll)
    np.testing.assert_allclose(total, (deviation + spread).sum(axis=1), rtol=1e-12)
    assert leaf_gaussians.leaf_totals(g, U, fired)[1] is None


def test_unknown_kind_is_refused_by_the_one_pass_read_out():
    rng = np.random.default_rng(0)
    X = rng.random((60, 3))
    clf = FERLClassifier("compact", random_state=0).fit(X, (X[:, 0] > 0.5).astype(int))
    with pytest.raises(ValueError, match="unknown OOD score kind 'entropy'"):
        clf.credal_readout(X, kind="entropy")
    with pytest.raises(ValueError, match="score_totals computes"):
        score_totals(clf.tree_, clf.leaf_gaussians_, X, clf.tree_.sparse_firing(X, True, clf._gate_margin()),
                     "ignorance")
