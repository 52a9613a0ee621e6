"""CUB-200-2011 loader: Koh 112 concepts, majority vote, fallback, splits, bad input."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from cbm.data import DATA_ROOT_ENV, load_cub, resolve_data_root
from cbm.data.common import DataFormatError, DatasetLayoutError, UnreadableImageError
from cbm.data.cub_attributes import KOH_112_ATTRIBUTE_INDICES, class_majority_vote

KOH = list(KOH_112_ATTRIBUTE_INDICES)


def test_koh_constant_is_112_sorted_unique():
    assert len(KOH_112_ATTRIBUTE_INDICES) == 112
    assert list(KOH_112_ATTRIBUTE_INDICES) == sorted(set(KOH_112_ATTRIBUTE_INDICES))
    assert KOH_112_ATTRIBUTE_INDICES[0] == 1 and KOH_112_ATTRIBUTE_INDICES[-1] == 311


# ---- fake tree: per-image majority vote ------------------------------------------------------


def test_majority_vote_matches_koh_and_checks_selection(fake_cub: Path, cub_values):
    t = load_cub(fake_cub)
    assert t.info["concept_source"] == "image_majority_vote"
    assert t.info["koh_selection_checked"] is True
    assert t.n_classes == 12 and t.n_concepts == 112
    expected = cub_values(12)[:, KOH]
    np.testing.assert_array_equal(t.class_concepts, expected)
    # every image carries its class's vector
    np.testing.assert_array_equal(t.concepts, t.class_concepts[t.y])
    assert t.concept_names[0] == "has_part0::value_1"
    assert t.concept_groups is not None and t.concept_groups["has_part0"][:2] == [0, 1]
    assert t.class_names[0] == "Fake_Bird_0" and t.class_ids[:2] == [1, 2]


def test_selection_mismatch_lists_indices(tmp_path: Path, cub_writer, cub_values):
    v = cub_values(12)
    v[:, 2] = 1  # a non-Koh attribute present everywhere
    v[:, KOH[5]] = 0  # a Koh attribute present nowhere
    cub = cub_writer(tmp_path, values=v)
    with pytest.raises(DataFormatError) as err:
        load_cub(cub)
    msg = str(err.value)
    assert "only derived [2]" in msg and f"only pinned [{KOH[5]}]" in msg
    # the check can be turned off
    t = load_cub(cub, check_koh_selection=False)
    assert t.info["koh_selection_checked"] is False


def test_class_majority_vote_rules():
    # class 1, attribute 1: present once, absent+not-visible twice -> present (skipped)
    # attribute 2: one present, one absent (certainty 3) -> tie -> present
    # attribute 3: absent twice (certain) -> absent; image 3 is test and does not vote
    rows = [
        (1, 1, 1, 4), (2, 1, 0, 1), (3, 1, 0, 4),
        (1, 2, 1, 2), (2, 2, 0, 3), (3, 2, 0, 4),
        (1, 3, 0, 4), (2, 3, 0, 4), (3, 3, 1, 4),
    ]  # fmt: skip
    df = pd.DataFrame(rows, columns=["image_id", "attribute_id", "is_present", "certainty_id"])
    vals, voted = class_majority_vote(df, {1: 1, 2: 1, 3: 1}, {1, 2}, 2, 3)
    np.testing.assert_array_equal(vals[0], [1, 1, 0])
    assert voted.tolist() == [True, False]
    assert vals[1].tolist() == [1, 1, 1]  # no votes: a tie, counts as present


@pytest.mark.parametrize("where", ["root", "attributes", "parent"])
def test_attributes_txt_locations(tmp_path: Path, where: str, cub_writer):
    cub = cub_writer(tmp_path, attributes_at=where, per_image=False)
    t = load_cub(tmp_path)  # a folder above CUB_200_2011 works too
    assert t.info["root"] == str(cub)
    assert t.concept_names[1] == "has_part0::value_4"


# ---- fallback --------------------------------------------------------------------------------


def test_fallback_continuous_threshold_is_flagged(fake_cub_fallback: Path, caplog, cub_values):
    with caplog.at_level(logging.WARNING, logger="cbm.data.cub"):
        t = load_cub(fake_cub_fallback)
    assert t.info["concept_source"] == "class_continuous_threshold"
    assert t.info["koh_selection_checked"] is False
    assert any("class_continuous_threshold" in r.getMessage() for r in caplog.records)
    np.testing.assert_array_equal(t.class_concepts, cub_values(12)[:, KOH])


def test_fallback_threshold_at_fifty(tmp_path: Path, cub_writer):
    cub = cub_writer(tmp_path, per_image=False)
    f = cub / "attributes" / "class_attribute_labels_continuous.txt"
    cont = np.loadtxt(f)
    cont[0, KOH[0]], cont[0, KOH[1]] = 50.0, 49.99
    np.savetxt(f, cont, fmt="%.4f")
    t = load_cub(cub)
    assert t.class_concepts[0, 0] == 1 and t.class_concepts[0, 1] == 0


def test_forced_fallback_ignores_per_image(fake_cub: Path):
    t = load_cub(fake_cub, concept_source="class_continuous_threshold")
    assert t.info["concept_source"] == "class_continuous_threshold"


# ---- splits and subsets ----------------------------------------------------------------------


def test_splits_official_flag_and_seeded_stratified_val(tmp_path: Path, cub_writer):
    cub = cub_writer(tmp_path, n_train=5, n_test=2, per_image=False)
    a = load_cub(cub, seed=3)
    b = load_cub(cub, seed=3)
    c = load_cub(cub, seed=4)
    np.testing.assert_array_equal(a.split, b.split)
    assert not np.array_equal(a.split, c.split)
    for cls in range(a.n_classes):
        s = a.split[a.y == cls]
        assert (s == "test").sum() == 2 and (s == "val").sum() == 1 and (s == "train").sum() == 4
    # test images are exactly the official test flags (j >= n_train)
    is_test = np.array([int(Path(p).stem.split("_")[-1]) >= 5 for p in a.paths])
    np.testing.assert_array_equal(a.split == "test", is_test)


def test_class_subsets_reindex(fake_cub: Path):
    full = load_cub(fake_cub)
    first = load_cub(fake_cub, classes=4)
    assert first.n_classes == 4 and set(first.y.tolist()) == {0, 1, 2, 3}
    np.testing.assert_array_equal(first.class_concepts, full.class_concepts[:4])
    # the split of a class does not depend on the subset
    np.testing.assert_array_equal(first.split, full.split[full.y < 4])
    listed = load_cub(fake_cub, classes=[5, "Fake_Bird_2", "010.Fake_Bird_9"])
    assert listed.class_names == ["Fake_Bird_4", "Fake_Bird_2", "Fake_Bird_9"]
    assert listed.class_ids == [5, 3, 10]
    np.testing.assert_array_equal(listed.class_concepts, full.class_concepts[[4, 2, 9]])
    with pytest.raises(ValueError, match="Did you mean"):
        load_cub(fake_cub, classes=["Fake_Bird_99x"])


def test_dataset_items(fake_cub: Path):
    t = load_cub(fake_cub, concept_source="class_continuous_threshold")
    ds = t.dataset("train")
    img, c, y = ds[0]
    assert img.mode == "RGB" and c.dtype == torch.float32 and c.shape == (112,)
    assert isinstance(y, int) and y == int(t.y[ds.indices[0]])


# ---- bad input ---------------------------------------------------------------------------------


def test_missing_folder_names_it_and_layout(tmp_path: Path):
    with pytest.raises(DatasetLayoutError, match="images.txt") as err:
        load_cub(tmp_path / "nowhere")
    assert "nowhere" in str(err.value) and "CUB_200_2011/" in str(err.value)
    with pytest.raises(DatasetLayoutError, match="CUB_200_2011"):
        load_cub(tmp_path)  # exists, but holds no CUB


def test_missing_file_named(fake_cub_fallback: Path):
    (fake_cub_fallback / "train_test_split.txt").unlink()
    with pytest.raises(DatasetLayoutError, match="train_test_split.txt"):
        load_cub(fake_cub_fallback)


def test_missing_continuous_file_in_fallback(tmp_path: Path, cub_writer):
    cub = cub_writer(tmp_path, per_image=False, continuous=False)
    with pytest.raises(DatasetLayoutError, match="class_attribute_labels_continuous"):
        load_cub(cub)


def test_listed_image_absent(fake_cub_fallback: Path):
    victim = next((fake_cub_fallback / "images").rglob("*.jpg"))
    victim.unlink()
    with pytest.raises(DatasetLayoutError, match=victim.name):
        load_cub(fake_cub_fallback)


def test_duplicated_id(fake_cub_fallback: Path):
    f = fake_cub_fallback / "image_class_labels.txt"
    f.write_text(f.read_text() + "1 1\n")
    with pytest.raises(DataFormatError, match="duplicated id 1"):
        load_cub(fake_cub_fallback)


def test_ids_listed_but_absent(fake_cub_fallback: Path):
    f = fake_cub_fallback / "train_test_split.txt"
    lines = f.read_text().splitlines()
    f.write_text("\n".join(lines[1:]) + "\n")
    with pytest.raises(DataFormatError, match=r"absent from train_test_split.txt: \[1\]"):
        load_cub(fake_cub_fallback)


def test_class_without_training_image(fake_cub_fallback: Path):
    f = fake_cub_fallback / "train_test_split.txt"
    ids_class1 = {
        ln.split()[0]
        for ln in (fake_cub_fallback / "image_class_labels.txt").read_text().splitlines()
        if ln.split()[1] == "1"
    }
    f.write_text(
        "".join(
            f"{i} {'0' if i in ids_class1 else flag}\n"
            for i, flag in (ln.split() for ln in f.read_text().splitlines())
        )
    )
    with pytest.raises(DataFormatError, match="no training image.*Fake_Bird_0"):
        load_cub(fake_cub_fallback)


def test_unreadable_image_error_or_skip(fake_cub_fallback: Path):
    victim = sorted((fake_cub_fallback / "images").rglob("*.jpg"))[0]
    victim.write_bytes(b"not a jpeg")
    t = load_cub(fake_cub_fallback)
    row = int(np.flatnonzero(t.paths == str(victim))[0])
    with pytest.raises(UnreadableImageError, match=victim.name):
        t.load(row)
    with pytest.raises(UnreadableImageError, match=victim.name):
        load_cub(fake_cub_fallback, check_images=True)
    skipped = load_cub(fake_cub_fallback, on_unreadable="skip")
    assert skipped.info["n_skipped_images"] == 1 and len(skipped) == len(t) - 1
    assert str(victim) not in set(skipped.paths)


def test_data_root_resolution(tmp_path: Path, monkeypatch, cub_writer):
    cub_writer(tmp_path / "cub", per_image=False)
    monkeypatch.setenv(DATA_ROOT_ENV, str(tmp_path))
    assert resolve_data_root() == tmp_path
    assert load_cub().n_classes == 12
    monkeypatch.setenv(DATA_ROOT_ENV, str(tmp_path / "missing"))
    with pytest.raises(DatasetLayoutError, match="missing"):
        load_cub()
    assert load_cub(data_root=tmp_path).n_classes == 12


# ---- the real subset (skipped when absent) ---------------------------------------------------


@pytest.fixture(scope="module")
def real_cub(real_data_root: Path):
    if not (real_data_root / "cub" / "CUB_200_2011").is_dir():
        pytest.skip("no CUB data under the data root")
    return load_cub(data_root=real_data_root)


def test_real_subset(real_cub, real_data_root: Path):
    t = real_cub
    assert t.n_classes == 50 and len(t) == 2889
    assert int(np.isin(t.split, ["train", "val"]).sum()) == 1500
    assert int((t.split == "test").sum()) == 1389
    assert t.n_concepts == 112
    assert t.concept_names[0] == "has_bill_shape::dagger"
    assert t.info["concept_source"] == "class_continuous_threshold"
    assert len({tuple(r) for r in t.class_concepts.tolist()}) == 50
    names = dict(
        ln.split(maxsplit=1)
        for ln in (real_data_root / "cub" / "CUB_200_2011" / "attributes.txt").read_text().splitlines()
    )
    assert t.concept_names == [names[str(i + 1)].strip() for i in KOH_112_ATTRIBUTE_INDICES]
    tsv = real_data_root / "cub" / "koh112_concepts.tsv"
    if tsv.is_file():
        koh = pd.read_csv(tsv, sep="\t")
        assert koh["cub_attribute_index_0based"].tolist() == list(KOH_112_ATTRIBUTE_INDICES)
        assert koh["name"].tolist() == t.concept_names
    assert "has_wing_color" in t.concept_groups


def test_real_cub20(real_data_root: Path):
    if not (real_data_root / "cub" / "CUB_200_2011").is_dir():
        pytest.skip("no CUB data under the data root")
    t = load_cub(data_root=real_data_root, classes=20)
    assert t.n_classes == 20 and t.y.max() == 19
    img, c, y = t.dataset("test")[0]
    assert min(img.size) == 256 and c.shape == (112,)
