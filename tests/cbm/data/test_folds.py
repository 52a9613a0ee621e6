"""Class-disjoint folds and open-world splits."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cbm.data import (
    ClassFold,
    check_folds,
    class_disjoint_folds,
    load_folds,
    open_world_split,
    save_folds,
)
from cbm.data.common import DataFormatError


@pytest.mark.parametrize(("n", "k"), [(50, 5), (20, 5), (7, 3), (200, 5), (2, 2)])
def test_disjoint_and_covering(n: int, k: int):
    folds = class_disjoint_folds(n, k=k, seed=0)
    assert len(folds) == k
    held = [c for f in folds for c in f.held_out]
    assert sorted(held) == list(range(n))  # disjoint and covering
    sizes = [len(f.held_out) for f in folds]
    assert max(sizes) - min(sizes) <= 1
    for f in folds:
        assert set(f.retained).isdisjoint(f.held_out)
        assert set(f.retained) | set(f.held_out) == set(range(n))


def test_seeded():
    assert class_disjoint_folds(50, 5, seed=1) == class_disjoint_folds(50, 5, seed=1)
    assert class_disjoint_folds(50, 5, seed=1) != class_disjoint_folds(50, 5, seed=2)


def test_bad_arguments():
    with pytest.raises(ValueError):
        class_disjoint_folds(3, k=5)
    with pytest.raises(ValueError):
        class_disjoint_folds(10, k=1)
    with pytest.raises(DataFormatError, match="both retained and held out"):
        ClassFold(0, (0, 1), (1, 2))


def test_check_folds_detects_overlap_and_gaps():
    a = ClassFold(0, (2, 3), (0, 1))
    b = ClassFold(1, (0, 2, 3), (1,))
    with pytest.raises(DataFormatError, match="held out in folds 0 and 1"):
        check_folds([a, b], 4)
    with pytest.raises(DataFormatError, match="never held out"):
        check_folds([a], 4)


def test_save_load_round_trip(tmp_path: Path):
    folds = class_disjoint_folds(10, k=5, seed=3)
    names = [f"c{i}" for i in range(10)]
    path = save_folds(tmp_path / "run" / "folds.json", folds, n_classes=10, seed=3, class_names=names)
    assert load_folds(path) == folds
    assert load_folds(path, class_names=names) == folds
    with pytest.raises(DataFormatError, match="class names differ"):
        load_folds(path, class_names=names[::-1])
    doc = json.loads(path.read_text())
    assert doc["seed"] == 3 and doc["k"] == 5 and not (tmp_path / "run" / "folds.json.tmp").exists()
    doc["folds"][0]["held_out"].append(doc["folds"][1]["held_out"][0])
    doc["folds"][0]["retained"].remove(doc["folds"][1]["held_out"][0])
    path.write_text(json.dumps(doc))
    with pytest.raises(DataFormatError):
        load_folds(path)
    path.write_text("{}")
    with pytest.raises(DataFormatError, match="schema"):
        load_folds(path)


def test_open_world_split():
    y = np.repeat(np.arange(10), 10)
    split = np.tile(np.array(["train"] * 6 + ["val"] * 2 + ["test"] * 2), 10)
    fold = class_disjoint_folds(10, 5, seed=0)[2]
    parts = open_world_split(y, split, fold)
    for p in ("train", "val", "test"):
        assert not np.isin(y[parts[p]], fold.held_out).any()
        assert set(y[parts[p]].tolist()) == set(fold.retained)
        assert (split[parts[p]] == p).all()
    assert set(y[parts["novel"]].tolist()) == set(fold.held_out)
    assert (split[parts["novel"]] == "test").all()
    assert len(parts["novel"]) == 2 * len(fold.held_out)
    everything = open_world_split(y, split, fold, novel_splits=("train", "val", "test"))
    assert len(everything["novel"]) == 10 * len(fold.held_out)
