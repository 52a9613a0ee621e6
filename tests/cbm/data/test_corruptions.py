"""ImageNet-C corruptions: names, checks, seeding and the corrupted dataset."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from cbm.data import build_transform
from cbm.data.corruptions import (
    CORRUPTIONS,
    GROUPS,
    VALIDATION,
    CorruptedDataset,
    check_corruptions,
    check_severities,
    corrupt,
    corruption_seed,
)
from cbm.data.synthetic import make_synthetic


def _image(seed=0, side=48):
    return (np.random.default_rng(seed).random((side, side + 8, 3)) * 255).astype(np.uint8)


def test_the_fifteen_evaluated_and_four_validation_corruptions_in_four_groups():
    assert len(CORRUPTIONS) == 15 and len(VALIDATION) == 4 and not set(CORRUPTIONS) & set(VALIDATION)
    assert sorted(set(GROUPS.values())) == sorted(set(VALIDATION.values())) == ["blur", "digital", "noise",
                                                                                 "weather"]


@pytest.mark.parametrize("name", [*CORRUPTIONS, *VALIDATION])
def test_every_corruption_is_seeded_and_keeps_the_global_generator(name):
    image = _image()
    np.random.seed(123)  # noqa: NPY002 -- the caller's own global draws must not move
    before = np.random.get_state()[1].copy()  # noqa: NPY002
    a, b = corrupt(image, name, 3, seed=7), corrupt(image, name, 3, seed=7)
    assert np.array_equal(np.random.get_state()[1], before)  # noqa: NPY002
    assert a.shape == image.shape and a.dtype == np.uint8 and np.array_equal(a, b)
    assert not np.array_equal(a, image)  # severity 3 changes every image


def test_random_corruptions_differ_with_the_seed_and_grow_with_severity():
    image = _image()
    assert not np.array_equal(corrupt(image, "gaussian_noise", 2, 1), corrupt(image, "gaussian_noise", 2, 2))
    change = [np.abs(corrupt(image, "defocus_blur", s, 0).astype(int) - image).mean() for s in (1, 3, 5)]
    assert change[0] < change[1] < change[2]
    assert corruption_seed(0, "fog", 2, "a/b") == corruption_seed(0, "fog", 2, "a/b") != corruption_seed(
        0, "fog", 2, "a/c")


@pytest.mark.parametrize("call, message", [
    (lambda: corrupt(_image(), "gaussian_nois", 1, 0), "unknown corruption"),
    (lambda: corrupt(_image(), "fog", 0, 0), "severities must be integers in 1-5"),
    (lambda: corrupt(_image(), "fog", 6, 0), "1-5"),
    (lambda: corrupt(_image(), "fog", True, 0), "1-5"),
    (lambda: corrupt(_image(side=16), "fog", 1, 0), "both sides >= 32"),
    (lambda: corrupt(_image().astype(np.float32), "fog", 1, 0), "uint8"),
    (lambda: check_corruptions([]), "non-empty"),
    (lambda: check_corruptions(["fog", "fog"]), "without repeats"),
    (lambda: check_corruptions(["saturate"], CORRUPTIONS), "unknown corruption"),
    (lambda: check_severities([2.5]), "1-5"),
])
def test_bad_input_is_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_a_missing_package_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "imagecorruptions", None)
    with pytest.raises(ImportError, match="imagecorruptions-imaug"):
        corrupt(_image(), "fog", 1, 0)


def test_the_corrupted_dataset_corrupts_the_evaluation_crop():
    table = make_synthetic(n_per_class=2, n_classes=3, n_heldout=0, image_size=40, seed=0)
    rows = np.arange(4)
    data = CorruptedDataset(table, rows, ["contrast"] * 4, [5] * 4, seed=0, image_size=32,
                            eval_crop_fraction=0.8)
    x, concepts, y = data[1]
    clean = build_transform(32, train=False, eval_crop_fraction=0.8)(table.load(1))
    assert x.shape == clean.shape == (3, 32, 32) and y == int(table.y[1])
    assert torch.equal(x, data[1][0]) and not torch.allclose(x, clean)
    assert x.std() < clean.std()  # severity-5 contrast flattens the crop
    with pytest.raises(ValueError, match="one corruption and one severity per row"):
        CorruptedDataset(table, rows, ["fog"] * 3, [1] * 4, 0, 32)
