"""The synthetic concept world."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from cbm.data import load_synthetic, make_synthetic, make_world
from cbm.data.common import DatasetLayoutError
from cbm.data.synthetic import write_synthetic
from cbm.data.synthetic_world import GROUPS


@pytest.fixture(scope="module")
def small():
    return make_synthetic(n_per_class=12, seed=5)


def test_sizes_and_groups(small):
    t = small
    assert t.n_concepts >= 24 and t.n_concepts == sum(len(v) for v in GROUPS.values())
    assert len(t.concept_groups) == 7
    assert t.images.shape[1:] == (64, 64, 3) and t.images.dtype == np.uint8
    seen = t.world.n_seen
    assert seen >= 20 and t.world.n_heldout >= 1
    # groups are mutually exclusive: exactly one concept on per group, per image
    for idx in t.concept_groups.values():
        assert (t.concepts[:, idx].sum(1) == 1).all()
    assert t.concept_names[0] == "shape::circle"


def test_same_seed_same_data():
    a = make_synthetic(n_per_class=5, seed=3)
    b = make_synthetic(n_per_class=5, seed=3)
    c = make_synthetic(n_per_class=5, seed=4)
    np.testing.assert_array_equal(a.images, b.images)
    np.testing.assert_array_equal(a.concepts, b.concepts)
    np.testing.assert_array_equal(a.split, b.split)
    assert not np.array_equal(a.images, c.images)
    # more images per class keeps the first ones
    d = make_synthetic(n_per_class=8, seed=3)
    np.testing.assert_array_equal(
        d.images[d.sample_ids == "class_03/00002"], a.images[a.sample_ids == "class_03/00002"]
    )


def test_heldout_never_in_training_splits(small):
    t = small
    held = t.heldout_classes
    assert held == list(range(t.world.n_seen, t.n_classes))
    assert set(t.split[np.isin(t.y, held)].tolist()) == {"novel"}
    for part in ("train", "val", "test"):
        assert not np.isin(t.y[t.split == part], held).any()
    assert (t.split == "novel").sum() == len(held) * 6
    # every seen class is in every split
    for part in ("train", "val", "test"):
        assert set(t.y[t.split == part].tolist()) == set(range(t.world.n_seen))


def test_anomalous_concepts_are_profile_differences(small):
    t, w = small, small.world
    cc = t.class_concepts
    counts = []
    for h, c in enumerate(t.heldout_classes):
        base = w.nearest_seen[h]
        diff = np.flatnonzero(cc[c] != cc[base]).tolist()
        assert t.anomalous_concepts[c] == diff
        n_groups = int((w.profiles[c] != w.profiles[base]).sum())
        assert 1 <= n_groups <= 3 and len(diff) == 2 * n_groups
        counts.append(n_groups)
        # the nearest seen class is unique
        others = [int((w.profiles[c] != w.profiles[s]).sum()) for s in range(w.n_seen) if s != base]
        assert min(others) > n_groups
        info = t.info["heldout"][h]
        assert info["anomalous_concepts"] == [t.concept_names[i] for i in diff]
        # novel images carry exactly their class profile
        np.testing.assert_array_equal(t.concepts[t.y == c], np.tile(cc[c], ((t.y == c).sum(), 1)))
    assert set(counts) == {1, 2, 3}


def test_seen_classes_distinct_and_balanced():
    w = make_world(n_classes=24, n_heldout=6, seed=1)
    p = w.profiles[: w.n_seen]
    d = (p[:, None] != p[None]).sum(-1) + np.eye(len(p), dtype=int) * 99
    assert d.min() >= 3
    cc = w.class_concepts[: w.n_seen]
    assert (cc.sum(0) >= 2).all()  # every concept value is used by several classes


def test_within_class_variability(small):
    t = small
    varied = [c for c in range(t.world.n_seen) if (t.concepts[t.y == c] != t.class_concepts[c]).any(1).any()]
    assert varied  # some images show their class's alternative value
    assert len(np.unique(t.images[t.y == 0].reshape(12, -1), axis=0)) == 12


def test_per_image_attribute_swaps_follow_the_image():
    """``p_swap``: each group of a seen-class image shows another value with that probability;
    labels stay one-hot per group and follow the pixels; held-out classes never swap; 0 is the
    default world, image for image."""
    t = make_synthetic(n_per_class=40, n_heldout=3, seed=1, p_swap=0.2)
    seen = t.y < t.world.n_seen
    groups = list(t.concept_groups.values())
    for idx in groups:
        assert (t.concepts[:, idx].sum(1) == 1).all()
    differs = np.stack([(t.concepts[:, idx] != t.class_concepts[t.y][:, idx]).any(1) for idx in groups], 1)
    # a group differs by a swap (0.2) or, for the class's variable group, by its variation (0.15 / 7)
    rate = differs[seen].mean()
    assert 0.18 < rate < 0.26, rate
    assert not differs[~seen].any()
    assert t.info["p_swap"] == 0.2
    dark, light = t.concept_names.index("background::dark"), t.concept_names.index("background::light")
    corners = t.images[:, :3, :3].reshape(len(t), -1).mean(1)
    assert (corners[t.concepts[:, dark] == 1] < 60).all() and (corners[t.concepts[:, light] == 1] > 190).all()
    swapped_bg = seen & differs[:, list(t.concept_groups).index("background")]
    assert swapped_bg.sum() > 50  # the pixel check above covers many swapped backgrounds
    plain, zero = make_synthetic(n_per_class=4, seed=1), make_synthetic(n_per_class=4, seed=1, p_swap=0.0)
    np.testing.assert_array_equal(plain.images, zero.images)
    for bad in (-0.1, 0.5, float("nan")):
        with pytest.raises(ValueError, match="p_swap"):
            make_synthetic(n_per_class=2, p_swap=bad)
    for bad in ("0.1", None, True, [0.1]):
        with pytest.raises(TypeError, match="p_swap"):
            make_synthetic(n_per_class=2, p_swap=bad)
    assert type(make_synthetic(n_per_class=1, p_swap=np.float32(0.1)).info["p_swap"]) is float


def test_interrupted_folder_write_does_not_load(tmp_path: Path, monkeypatch):
    """Rewriting a folder removes world.json first and writes it last: a write that fails midway
    leaves a folder that refuses to load instead of old metadata over new images."""
    make_synthetic(n_per_class=2, n_classes=20, n_heldout=1, seed=0, folder=tmp_path / "syn")
    table = make_synthetic(n_per_class=2, n_classes=20, n_heldout=1, seed=1, p_swap=0.3)
    calls = {"n": 0}
    save = Image.Image.save

    def failing_save(img, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] > 5:
            raise OSError("disk full")
        return save(img, *args, **kwargs)

    monkeypatch.setattr(Image.Image, "save", failing_save)
    with pytest.raises(OSError, match="disk full"):
        write_synthetic(table, tmp_path / "syn")
    with pytest.raises(DatasetLayoutError, match="world.json"):
        load_synthetic(tmp_path / "syn")


def test_folder_round_trip(tmp_path: Path):
    t = make_synthetic(n_per_class=3, n_classes=20, n_heldout=3, seed=2, folder=tmp_path / "syn")
    back = load_synthetic(tmp_path / "syn")
    np.testing.assert_array_equal(back.concepts, t.concepts)
    np.testing.assert_array_equal(back.split, t.split)
    np.testing.assert_array_equal(np.asarray(back.load(7)), t.images[7])  # PNG is lossless
    assert back.anomalous_concepts == t.anomalous_concepts
    assert back.concept_groups == t.concept_groups


def test_image_size_and_visual_concepts():
    t = make_synthetic(n_per_class=2, image_size=96, seed=0)
    assert t.images.shape[1:] == (96, 96, 3)
    dark = t.concept_names.index("background::dark")
    light = t.concept_names.index("background::light")
    corners = t.images[:, :3, :3].reshape(len(t), -1).mean(1)
    assert (corners[t.concepts[:, dark] == 1] < 60).all()
    assert (corners[t.concepts[:, light] == 1] > 190).all()
