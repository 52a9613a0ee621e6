"""A model file saved by an earlier version loads and reads out bit for bit.

``data/model_v0_1`` holds a small FERL-deep model (240 rows, 6 features, 3 classes, 12 rules) saved
before the ``ferl/`` house move (its modules split into rooms by stage), and its read-out on 25
fixed inputs (20 in distribution, 5 far off), written by that version. A refactor that changes one
float of the evidence, the credal set or the certificate fails here; the novelty scores, whose sums
run through BLAS, may differ in their last bits between numpy / OpenBLAS releases (a few units in
the last place, seen with numpy 2.4), so they are held to 1e-13 relative.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ferl import FERLClassifier
from ferl.benchmarks.ood_kinds import ABLATION_KINDS, ablation_score

DATA = Path(__file__).parent / "data" / "model_v0_1"


@pytest.fixture(scope="module")
def stored():
    return FERLClassifier.load(DATA / "model"), dict(np.load(DATA / "readout.npz"))


def test_evidence_set_and_certificate_are_bit_for_bit(stored):
    clf, ref = stored
    X = ref["X"]
    ev = clf.evidence(X)
    for name in ("mass", "plausibility", "ignorance", "conflict"):
        np.testing.assert_array_equal(getattr(ev, name), ref[name], err_msg=name)
    np.testing.assert_array_equal(clf.predict_proba(X), ref["proba"])
    np.testing.assert_array_equal(clf.predict(X), ref["pred"])
    np.testing.assert_array_equal(clf.predict_set(X), ref["set"])
    np.testing.assert_array_equal(clf.robustness_radius(X), ref["radius"])


def test_novelty_scores_are_bit_for_bit(stored):
    """The product's kinds through ``ood_score``, the ablation kinds through the ablation function:
    both give the floats ``ood_score`` gave for every kind before the ablation kinds moved."""
    clf, ref = stored
    kinds = [k[len("ood_"):] for k in ref if k.startswith("ood_")]
    assert set(kinds) == {"typical", "ignorance", *ABLATION_KINDS}
    for kind in kinds:
        X = ref["X"]
        score = ablation_score(clf, X, kind) if kind in ABLATION_KINDS else clf.ood_score(X, kind)
        np.testing.assert_allclose(score, ref[f"ood_{kind}"], rtol=1e-13, atol=1e-14, err_msg=kind)


def test_discounted_read_out_is_bit_for_bit(stored):
    clf, ref = stored
    clf.set_params(novelty_discount=True)
    try:
        np.testing.assert_array_equal(clf.predict_set(ref["X"]), ref["set_discounted"])
        np.testing.assert_allclose(clf.evidence(ref["X"]).ignorance, ref["ignorance_discounted"], rtol=1e-13,
                                   atol=1e-14)
    finally:
        clf.set_params(novelty_discount=False)
