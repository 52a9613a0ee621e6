"""AwA2 images, AwA2 metadata and the precomputed AwA features."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from cbm.data import load_awa2, load_awa2_metadata, load_awa_features
from cbm.data.common import DataFormatError, DatasetLayoutError, UnreadableImageError


def _assert_stratified(y: np.ndarray, split: np.ndarray, fractions=(0.6, 0.2, 0.2)) -> None:
    for c in np.unique(y):
        s = split[y == c]
        for name, f in zip(("train", "val", "test"), fractions, strict=True):
            assert abs((s == name).sum() - f * len(s)) <= 1, (c, name)


def test_fake_awa2_images(fake_awa2: Path):
    t = load_awa2(fake_awa2)
    meta = load_awa2_metadata(fake_awa2)
    assert t.n_classes == 4 and t.n_concepts == 85 and len(t) == 20
    assert t.class_names[1] == "grizzly+bear"
    np.testing.assert_array_equal(t.concepts, meta.binary[t.y])
    assert t.concept_groups is None
    assert t.info["zero_shot_test_classes"] == ["killer+whale"]
    _assert_stratified(t.y, t.split)
    for c in range(4):
        assert (t.split[t.y == c] == "train").sum() == 3
    assert t.sample_ids[0] == "antelope/antelope_10001.jpg"
    img, c, y = t.dataset("val")[0]
    assert img.mode == "RGB" and c.dtype == torch.float32 and c.shape == (85,)


def test_awa2_seeded(fake_awa2: Path):
    a, b, c = load_awa2(fake_awa2, seed=1), load_awa2(fake_awa2, seed=1), load_awa2(fake_awa2, seed=2)
    np.testing.assert_array_equal(a.split, b.split)
    assert not np.array_equal(a.split, c.split)


def test_awa2_parent_folder_and_subset(fake_awa2: Path):
    t = load_awa2(fake_awa2.parent, classes=["killer+whale", "antelope"])
    assert t.class_names == ["killer+whale", "antelope"]
    assert set(t.y.tolist()) == {0, 1}
    meta = load_awa2_metadata(fake_awa2)
    np.testing.assert_array_equal(t.class_concepts, meta.binary[[2, 0]])


def test_awa2_missing_class_folder(fake_awa2: Path):
    (fake_awa2 / "JPEGImages" / "beaver").rename(fake_awa2 / "JPEGImages" / "Beaver")
    with pytest.raises(DatasetLayoutError, match="beaver"):
        load_awa2(fake_awa2)


def test_awa2_empty_class_folder(fake_awa2: Path):
    for f in (fake_awa2 / "JPEGImages" / "beaver").iterdir():
        f.unlink()
    with pytest.raises(DataFormatError, match="beaver"):
        load_awa2(fake_awa2)


def test_awa2_missing_images_and_files(fake_awa2: Path):
    (fake_awa2 / "predicates.txt").unlink()
    with pytest.raises(DatasetLayoutError, match="predicates.txt"):
        load_awa2(fake_awa2)


def test_awa2_no_images_folder(tmp_path: Path, awa2_writer):
    base = awa2_writer(tmp_path, n_images=0, features=False)
    with pytest.raises(DatasetLayoutError, match="JPEGImages"):
        load_awa2(base)
    assert load_awa2_metadata(base).binary.shape == (4, 85)


def test_awa2_bad_matrix_shape(fake_awa2: Path):
    np.savetxt(fake_awa2 / "predicate-matrix-binary.txt", np.zeros((3, 85)), fmt="%d")
    with pytest.raises(DataFormatError, match=r"shape \(3, 85\)"):
        load_awa2_metadata(fake_awa2)


def test_awa2_unreadable_skip(fake_awa2: Path):
    victim = fake_awa2 / "JPEGImages" / "beaver" / "beaver_10001.jpg"
    victim.write_bytes(b"\xff\xd8garbage")
    with pytest.raises(UnreadableImageError, match="beaver_10001.jpg"):
        load_awa2(fake_awa2, check_images=True)
    t = load_awa2(fake_awa2, on_unreadable="skip")
    assert t.info["skipped_images"] == [str(victim)] and len(t) == 19


def test_fake_features(fake_awa2: Path):
    t = load_awa_features(root=fake_awa2)
    assert t.kind == "features" and t.n_features == 6 and len(t) == 40
    _assert_stratified(t.y, t.split)
    train = t.features[t.split == "train"]
    np.testing.assert_allclose(train.mean(0), 0, atol=1e-5)
    x, c, y = t.dataset("test")[0]
    assert x.shape == (6,) and c.shape == (85,)
    raw = load_awa_features(root=fake_awa2, standardize=False)
    assert raw.features.dtype == np.float32


def test_features_class_names_must_match(fake_awa2: Path):
    f = fake_awa2 / "features" / "awa1_features.npz"
    with np.load(f) as npz:
        arrays = dict(npz)
    arrays["classes"] = arrays["classes"][::-1]
    np.savez(f, **arrays)
    with pytest.raises(DataFormatError, match="class names"):
        load_awa_features(root=fake_awa2)


def test_features_missing_file(fake_awa2: Path):
    with pytest.raises(DatasetLayoutError, match="nope.npz"):
        load_awa_features(fake_awa2 / "nope.npz", root=fake_awa2)


# ---- real metadata and features (skipped when absent) -----------------------------------------


@pytest.fixture(scope="module")
def real_awa2(real_data_root: Path) -> Path:
    if not (real_data_root / "awa2" / "predicate-matrix-binary.txt").is_file():
        pytest.skip("no AwA2 metadata under the data root")
    return real_data_root


def test_real_awa2_metadata(real_awa2: Path):
    meta = load_awa2_metadata(data_root=real_awa2)
    assert len(meta.class_names) == 50 and len(meta.predicate_names) == 85
    assert meta.binary.shape == (50, 85)
    assert "grizzly+bear" in meta.class_names
    assert len(meta.train_classes) == 40 and len(meta.test_classes) == 10


def test_real_awa_features(real_awa2: Path):
    if not (real_awa2 / "awa2" / "features" / "awa1_features.npz").is_file():
        pytest.skip("no AwA features")
    t = load_awa_features(data_root=real_awa2)
    assert t.n_classes == 50 and t.n_concepts == 85 and len(t) == 30475
    assert t.n_features == 764 and np.isfinite(t.features).all()
    _assert_stratified(t.y, t.split)
    meta = load_awa2_metadata(data_root=real_awa2)
    np.testing.assert_array_equal(t.concepts, meta.binary[t.y])
