"""Model files keep the novelty model, and refuse one without it or hand-edited."""

import copy

import numpy as np
import pytest

from ferl import FERLClassifier
from ferl.benchmarks.ood import ferl_score
from ferl.io import persist
from ferl.novelty import leaf_gaussians
from ferl.novelty.leaf_gaussians import LeafGaussians


def test_save_load_keeps_the_novelty_model(tmp_path, wine_deep, wine):
    _, X_te, _, _ = wine
    wine_deep.save(tmp_path / "m")
    back = FERLClassifier.load(tmp_path / "m")
    np.testing.assert_array_equal(back.tree_.free_var, wine_deep.tree_.free_var)
    np.testing.assert_array_equal(back.leaf_gaussians_.cov, wine_deep.leaf_gaussians_.cov)
    Z = X_te + 0.3
    for kind in ("leaf", "nll", "combined", "residual", "firing", "ignorance"):
        np.testing.assert_array_equal(ferl_score(back, Z, kind), ferl_score(wine_deep, Z, kind))
    assert back.anomalous_features(Z, 3) == wine_deep.anomalous_features(Z, 3)


def test_loading_a_model_saved_without_the_gaussians_raises(tmp_path, wine_deep):
    wine_deep.save(tmp_path / "m")
    meta, arrays = persist.read_model(tmp_path / "m")
    del arrays["tree_free_var"]
    meta = {k: v for k, v in meta.items() if k not in ("schema_version", "npz_sha256")}
    persist.write_model(tmp_path / "old", meta, arrays)
    with pytest.raises(ValueError, match=r"lacks the tree arrays \['free_var'\]"):
        FERLClassifier.load(tmp_path / "old")


def test_loading_a_model_saved_without_the_leaf_gaussians_raises(tmp_path, wine_deep):
    wine_deep.save(tmp_path / "m")
    meta, arrays = persist.read_model(tmp_path / "m")
    arrays = {k: v for k, v in arrays.items() if not k.startswith("leaf_")}
    meta = {k: v for k, v in meta.items() if k not in ("schema_version", "npz_sha256")}
    persist.write_model(tmp_path / "old", meta, arrays)
    with pytest.raises(ValueError, match="lacks the leaf Gaussian arrays.*refit"):
        FERLClassifier.load(tmp_path / "old")


def test_a_model_whose_leaves_borrow_correlations_loads(tmp_path, wine_deep, wine):
    """A leaf below ``SUPPORT d`` holds its own variances and correlations fitted elsewhere, so its
    covariance can have eigenvalues below the ridge (its variances keep it). The loader refused such
    models as "not positive definite" (``make demo`` and ``predict`` failed on fit-head's FERL-deep
    heads)."""
    g = wine_deep.leaf_gaussians_
    cov = g.cov.copy()
    sd = np.sqrt(np.diag(cov[0]))
    corr = np.eye(len(sd))
    corr[0, 1] = corr[1, 0] = 1 - 1e-3  # two features almost one: a direction of tiny variance
    cov[0] = corr * np.outer(sd, sd)
    model = copy.deepcopy(wine_deep)
    model.leaf_gaussians_ = LeafGaussians(g.center, g.scale, g.leaves, g.mean, cov, g.reliability)
    assert np.linalg.eigvalsh(cov[0]).min() < leaf_gaussians.RIDGE / 2 <= np.diag(cov[0]).min()
    model.save(tmp_path / "m")
    loaded = FERLClassifier.load(tmp_path / "m")
    np.testing.assert_array_equal(loaded.ood_score(wine[1]), model.ood_score(wine[1]))


@pytest.mark.parametrize("edit", ["not_pd", "nan_mean", "wrong_leaves", "bad_width"])
def test_a_hand_edited_leaf_gaussian_is_refused(tmp_path, wine_deep, edit):
    wine_deep.save(tmp_path / "m")
    meta, arrays = persist.read_model(tmp_path / "m")
    if edit == "not_pd":
        arrays["leaf_cov_tril"] = -arrays["leaf_cov_tril"]
    elif edit == "nan_mean":
        arrays["leaf_mean"] = arrays["leaf_mean"].copy()
        arrays["leaf_mean"][0, 0] = np.nan
    elif edit == "wrong_leaves":
        arrays["leaf_leaves"] = arrays["leaf_leaves"] + 1
    else:
        arrays["leaf_reliability"] = np.array([1.0, 0.0])
    meta = {k: v for k, v in meta.items() if k not in ("schema_version", "npz_sha256")}
    persist.write_model(tmp_path / "edited", meta, arrays)
    with pytest.raises(ValueError, match="corrupted model"):
        FERLClassifier.load(tmp_path / "edited")
