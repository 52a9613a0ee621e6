"""Your own image folder with a concepts CSV (cbm.data.custom) and the data validator."""

from __future__ import annotations

import runpy
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from cbm.data import (
    ConceptDataModule,
    DataFormatError,
    DatasetLayoutError,
    UnreadableImageError,
    load_custom,
    load_dataset,
)
from cbm.data.concept_tables import save_concept_table
from cbm.data.validate import main as validate_main
from cbm.data.validate import validate_path

EXAMPLE = Path(__file__).resolve().parents[3] / "scripts" / "make_custom_example.py"


@pytest.fixture
def example(tmp_path) -> Path:
    """The README's example (5 classes x 8 images, 3 concept groups), written by its script."""
    return runpy.run_path(str(EXAMPLE))["write_example"](tmp_path / "example")


def _image(path: Path, colour=(200, 10, 10)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8), colour).save(path)


def test_example_is_tiny_and_loads_with_groups_and_a_seeded_split(example):
    files = list(example.rglob("*.png"))
    assert len(files) == 46  # 40 to train on, 6 of a new class in new_images/
    tab = load_custom(example)
    assert tab.class_names == ["blue_circle", "blue_squares", "red_circle", "red_circles", "red_square"]
    assert len(tab) == 40
    assert tab.concept_names == ["colour::red", "colour::blue", "shape::circle", "shape::square",
                                 "count::one", "count::two"]
    assert tab.concept_groups == {"colour": [0, 1], "shape": [2, 3], "count": [4, 5]}
    red_square = tab.class_names.index("red_square")
    assert tab.class_concepts[red_square].tolist() == [1, 0, 0, 1, 1, 0]
    assert (tab.concepts == tab.class_concepts[tab.y]).all()  # per-class concepts
    assert {s: int((tab.split == s).sum()) for s in ("train", "val", "test")} == {"train": 25, "val": 10,
                                                                                  "test": 5}
    assert (load_custom(example).split == tab.split).all()  # same seed, same split
    assert tab.sample_ids[0] == "blue_circle/00.png" and tab.load(0).size == (32, 32)
    assert load_dataset("custom", root=example).n_classes == 5  # registered by name
    dm = ConceptDataModule("custom", dataset_kwargs={"root": str(example)}, image_size=32)
    assert dm.image_size == 32 and dm.train_dataloader().dataset[0][0].shape == (3, 32, 32)


def test_per_image_concepts_with_splits_and_majority_class_profiles(tmp_path):
    rows = ["image,colour::red,colour::blue,split"]
    for c, colour in (("a", (1, 0)), ("b", (0, 1))):
        for i in range(3):
            _image(tmp_path / "images" / c / f"{i}.jpg")
            value = colour if i < 2 else colour[::-1]  # the third image of each class deviates
            rows.append(f"{c}/{i}.jpg,{value[0]},{value[1]},{('train', 'val', 'test')[i]}")
    (tmp_path / "concepts.csv").write_text("\n".join(rows) + "\n")
    tab = load_custom(tmp_path)
    assert tab.split.tolist() == ["train", "val", "test"] * 2
    assert tab.concepts[2].tolist() == [0, 1] and tab.class_concepts.tolist() == [[1, 0], [0, 1]]
    assert tab.info["concept_source"] == "per_image" and tab.concept_groups == {"colour": [0, 1]}


def test_unreadable_images_fail_or_are_skipped_with_their_rows(tmp_path):
    rows = ["image,x,split"]
    for c in ("a", "b"):
        for i, split in enumerate(("train", "train", "val", "test")):
            _image(tmp_path / "images" / c / f"{i}.png")
            rows.append(f"{c}/{i}.png,{int(c == 'a' and i == 2)},{split}")
    (tmp_path / "images" / "a" / "1.png").write_bytes(b"not an image")
    (tmp_path / "concepts.csv").write_text("\n".join(rows) + "\n")
    with pytest.raises(UnreadableImageError, match="a/1.png"):
        load_custom(tmp_path, check_images=True)
    assert len(load_custom(tmp_path)) == 8  # unchecked: a bad file fails only when loaded
    tab = load_custom(tmp_path, on_unreadable="skip")
    assert list(tab.sample_ids) == ["a/0.png", "a/2.png", "a/3.png"] + [f"b/{i}.png" for i in range(4)]
    assert tab.y.tolist() == [0, 0, 0, 1, 1, 1, 1] and tab.concepts[:, 0].tolist() == [0, 1, 0, 0, 0, 0, 0]
    assert tab.split.tolist() == ["train", "val", "test", "train", "train", "val", "test"]
    assert tab.info["skipped_images"] == [str(tmp_path / "images" / "a" / "1.png")]
    assert tab.info["n_skipped_images"] == 1 and len(tab.paths) == 7


@pytest.mark.parametrize(("csv", "message"), [
    ("kind,x\na,1\nb,0\n", r"concepts.csv:1: the first column must be 'class'"),
    ("class,x\na,1\nb,2\n", r"concepts.csv:3: concept 'x' is '2' \(must be 0 or 1\)"),
    ("class,x\na,1\n", r"no row for 1 class\(s\) of images/, e.g. \['b'\]"),
    ("class,x\na,1\nb,0\nc,1\n", r"concepts.csv:4: class 'c' is not in"),
    ("class,x\na,1\na,0\nb,1\n", r"concepts.csv:3: class 'a' is listed twice"),
    ("class,x,x\na,1,1\nb,0,0\n", r"duplicated: \['x'\]"),
    ("class,x\na,1\nb\n", r"concepts.csv:3: 1 fields, the header has 2"),
    ("image,x,split\na/0.png,1,train\nb/0.png,0,later\n", r"split values \['later'\]"),
])
def test_bad_concepts_csv_names_file_line_and_column(tmp_path, csv, message):
    for c in ("a", "b"):
        _image(tmp_path / "images" / c / "0.png")
    (tmp_path / "concepts.csv").write_text(csv)
    with pytest.raises(DataFormatError, match=message):
        load_custom(tmp_path)


def test_a_concepts_csv_that_is_not_utf8_is_named(tmp_path):
    for c in ("a", "b"):
        _image(tmp_path / "images" / c / "0.png")
    (tmp_path / "concepts.csv").write_bytes("class,crème\na,1\nb,0\n".encode("latin-1"))
    with pytest.raises(DataFormatError, match=r"concepts.csv is not UTF-8 text \(byte 0xe8 .* as UTF-8"):
        load_custom(tmp_path)  # it was a bare UnicodeDecodeError without the file's name


@pytest.mark.parametrize("data, message", [
    ("class,x\na,1\nb,0\n".encode("utf-16-le"), r"concepts.csv holds NUL bytes, so it is not UTF-8"),
    (b"class,x\na," + b"1" * 200_000 + b"\nb,0\n", r"concepts.csv:2: not a readable CSV line \(field larger"),
])
def test_a_concepts_csv_that_csv_cannot_read_is_named(tmp_path, data, message):
    for c in ("a", "b"):
        _image(tmp_path / "images" / c / "0.png")
    (tmp_path / "concepts.csv").write_bytes(data)
    with pytest.raises(DataFormatError, match=message):
        load_custom(tmp_path)  # UTF-16 without a BOM: "N fields" on a wrong line; long field: bare csv.Error


def test_layout_problems_are_named(tmp_path):
    with pytest.raises(DatasetLayoutError, match="none of these folders holds concepts.csv"):
        load_custom(tmp_path)
    (tmp_path / "concepts.csv").write_text("class,x\na,1\n")
    with pytest.raises(DatasetLayoutError, match="missing folder .*images"):
        load_custom(tmp_path)
    _image(tmp_path / "images" / "a" / "0.png")
    with pytest.raises(DataFormatError, match="need two or more class folders"):
        load_custom(tmp_path)


def test_validator_reports_ok_and_names_what_is_wrong(example, tmp_path, capsys):
    assert "custom data set: 40 images, 5 classes, 6 concepts (3 concept groups)" in validate_path(example)
    concepts = tmp_path / "run" / "concepts"
    args = {"concept_labels": np.zeros((2, 2), np.uint8), "y": [0, 1], "concept_names": ["p", "q"],
            "class_names": ["A", "B"], "sample_ids": ["s0", "s1"]}
    for split in ("train", "val"):
        save_concept_table(concepts / f"{split}.npz", probs=np.full((2, 2), 0.5, np.float32), **args)
    assert "2 concept tables (train 2, val 2 rows), 2 concepts" in validate_path(tmp_path / "run")
    bad = dict(np.load(concepts / "val.npz"))
    bad["probs"] = np.array([[0.5, 0.5], [0.5, 1.5]], np.float32)
    np.savez(concepts / "val.npz", **bad)
    assert validate_main([str(concepts / "train.npz"), str(concepts / "val.npz")]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("OK ") and "concept table 'train': 2 rows" in out[0]
    assert out[1].startswith("FAIL ") and "row 1 (sample 's1'), concept 'q' is 1.5 (outside [0, 1]" in out[1]


def test_validator_names_an_unreadable_image_instead_of_a_traceback(example, capsys):
    next(iter(sorted((example / "images").rglob("*.png")))).write_bytes(b"junk")
    assert validate_main([str(example)]) == 1
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("FAIL ") and "cannot read image" in line
