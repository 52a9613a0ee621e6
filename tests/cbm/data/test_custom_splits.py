"""Custom data sets: split names read whole, validate refusing the splits training refuses,
and files that are not regular files skipped (each a user's report)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from cbm.data import DataFormatError, load_custom
from cbm.data.common import check_split_sizes
from cbm.data.validate import main as validate_main
from cbm.data.validate import validate_path


def _folder(root: Path, splits: dict[str, list[str]]) -> Path:
    """Two classes, one image per listed split value, per-image concepts with a split column."""
    rows = ["image,x,split"]
    for c, values in splits.items():
        for i, split in enumerate(values):
            (root / "images" / c).mkdir(parents=True, exist_ok=True)
            Image.new("RGB", (8, 8), (40 * i, 90, 30)).save(root / "images" / c / f"{i}.png")
            rows.append(f"{c}/{i}.png,{int(c == 'a')},{split}")
    (root / "concepts.csv").write_text("\n".join(rows) + "\n")
    return root


@pytest.mark.parametrize("bad", ["trainval", "testing", "validation"])
def test_a_long_split_name_is_refused_whole_not_cut_to_five_characters(tmp_path, bad):
    # "trainval" became "train" (and val stayed empty); "testing" was reported as 'testi'
    _folder(tmp_path, {"a": ["train", "train", bad, "test"], "b": ["train", "train", "val", "test"]})
    allowed = r"allowed: \['train', 'val', 'test'\]"
    with pytest.raises(DataFormatError, match=rf"split values \['{bad}'\]; {allowed}"):
        load_custom(tmp_path)


def test_validate_refuses_a_split_training_refuses_with_the_same_message(tmp_path, capsys):
    _folder(tmp_path, {"a": ["train", "train", "test"], "b": ["train", "train", "test"]})  # no val rows
    with pytest.raises(ValueError) as training:
        check_split_sizes({"train": 4, "val": 0, "test": 2})  # what export_loaders (train-detector) calls
    assert str(training.value).startswith("split 'val' has no samples")
    with pytest.raises(ValueError) as validated:
        validate_path(tmp_path)
    assert str(validated.value) == str(training.value)
    assert validate_main([str(tmp_path)]) == 1 and "FAIL" in capsys.readouterr().out
    with pytest.raises(ValueError, match="the training split has 1 sample"):
        check_split_sizes({"train": 1, "val": 1, "test": 1})


def test_validate_refuses_an_empty_split_of_the_seeded_split_too(tmp_path):
    for c in ("a", "b"):
        for i in range(2):  # 2 images per class: 60/20/20 leaves val or test empty
            (tmp_path / "images" / c).mkdir(parents=True, exist_ok=True)
            Image.new("RGB", (8, 8)).save(tmp_path / "images" / c / f"{i}.png")
    (tmp_path / "concepts.csv").write_text("class,x\na,1\nb,0\n")
    with pytest.raises(ValueError, match=r"split '(val|test)' has no samples"):
        validate_path(tmp_path)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_a_fifo_named_like_an_image_is_not_collected(tmp_path):
    # it hung validate and train-detector, which opened it to read an image
    root = _folder(tmp_path, {"a": ["train", "train", "val", "test"], "b": ["train", "train", "val", "test"]})
    os.mkfifo(root / "images" / "a" / "pipe.png")
    os.mkdir(root / "images" / "b" / "folder.png")
    table = load_custom(root)  # the CSV lists no pipe.png: an unlisted image would be an error
    assert len(table) == 8 and not any("pipe" in p or "folder" in p for p in table.paths)
    concepts = tmp_path / "run" / "concepts"
    concepts.mkdir(parents=True)
    os.mkfifo(concepts / "train.npz")
    with pytest.raises(FileNotFoundError, match="holds no concept tables"):
        validate_path(tmp_path / "run")
    assert np.isin(table.split, ["train", "val", "test"]).all()


def test_identical_class_profiles_and_an_empty_group_name_are_warned_about(tmp_path, caplog):
    for c in ("a", "b", "c"):
        for i in range(3):
            (tmp_path / "images" / c).mkdir(parents=True, exist_ok=True)
            Image.new("RGB", (8, 8)).save(tmp_path / "images" / c / f"{i}.png")
    (tmp_path / "concepts.csv").write_text("class,::red,colour::blue\na,1,0\nb,1,0\nc,0,1\n")
    with caplog.at_level("WARNING"):
        table = load_custom(tmp_path)
    assert "1 pair(s) of classes have the same concept profile, e.g. [('a', 'b')]" in caplog.text
    assert "concept(s) ['::red'] have an empty group name" in caplog.text
    assert table.concept_groups == {"": [0], "colour": [1]}
