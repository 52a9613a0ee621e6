"""The detector's feature typicality: the tied-covariance Mahalanobis distance of backbone features."""

from __future__ import annotations

import numpy as np
import pytest

from cbm.detector.typicality import FeatureTypicality
from ferl.benchmarks.ood import MahalanobisDetector


def _features(seed=0, n=120, d=16, classes=4):
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(classes), n // classes)
    return rng.normal(size=(classes, d))[y] * 3 + rng.normal(size=(n, d)), y


def test_the_fast_mahalanobis_equals_its_definition():
    X, y = _features()
    det = MahalanobisDetector().fit(X, y)
    probe = np.vstack([X[:7], X[:3] + 5.0])
    diff = probe[:, None, :] - det.means_[None]
    brute = np.einsum("ncd,de,nce->nc", diff, det.precision_, diff).min(axis=1)
    np.testing.assert_allclose(det.score(probe), brute, rtol=1e-9, atol=1e-9)


def test_typical_images_score_low_and_shifted_ones_high():
    X, y = _features()
    typ = FeatureTypicality().fit(X, y)
    assert typ.score(typ.means_).max() < 1e-6  # a class mean is at distance 0 from itself
    rng = np.random.default_rng(1)
    clean, shifted = typ.score(X[:40]), typ.score(X[:40] + rng.normal(0, 2.0, (40, X.shape[1])))
    assert np.all(clean >= 0) and np.median(shifted) > 2 * np.median(clean)


def test_save_and_load_give_the_same_scores_and_refuse_damage(tmp_path):
    X, y = _features()
    typ = FeatureTypicality().fit(X, y)
    typ.save(tmp_path / "t.npz")
    np.testing.assert_array_equal(FeatureTypicality.load(tmp_path / "t.npz").score(X), typ.score(X))
    np.savez(tmp_path / "bad.npz", means=typ.means_, whiten=typ.whiten_[:, :3], version=np.int64(1))
    with pytest.raises(ValueError, match="train the detector again"):
        FeatureTypicality.load(tmp_path / "bad.npz")
    (tmp_path / "text.npz").write_text("not an archive")
    with pytest.raises(ValueError, match="not a feature-typicality file"):
        FeatureTypicality.load(tmp_path / "text.npz")
    with pytest.raises(FileNotFoundError, match="train-detector"):
        FeatureTypicality.load(tmp_path / "absent.npz")


@pytest.mark.parametrize("call, message", [
    (lambda t: t.score(np.full((2, 16), np.nan)), "NaN"),
    (lambda t: t.score(np.zeros((2, 15))), r"\(n, 16\)"),
    (lambda t: FeatureTypicality().score(np.zeros((2, 16))), "not fitted"),
    (lambda t: FeatureTypicality().fit(np.zeros((1, 16)), np.zeros(1)), "at least 2 rows"),
])
def test_bad_input_is_named(call, message):
    typ = FeatureTypicality().fit(*_features())
    with pytest.raises(ValueError, match=message):
        call(typ)
