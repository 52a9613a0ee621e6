"""Tests for the KEEL loader, the fold protocol and min-max scaling (ferl.benchmarks)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from ferl.benchmarks.keel import default_data_root, list_datasets, load_keel
from ferl.benchmarks.protocol import make_splits, scale_fold

SHARED = default_data_root()  # $FERL_DATA_ROOT/tabular or ../shared/data/tabular; skip without it


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / f"{name}.dat"
    path.write_text(text)
    return path


def test_load_numeric_labels_sorted_numerically_and_blank_lines(tmp_path):
    path = _write(tmp_path, "toy", "1.0, 2.5, 10\n\n3.0,4.0,2\n5, 6, 10\n")
    ds = load_keel(path)
    assert ds.name == "toy"
    np.testing.assert_array_equal(ds.X, [[1.0, 2.5], [3.0, 4.0], [5.0, 6.0]])
    assert ds.class_names == ["2", "10"]  # numeric order, not string order
    np.testing.assert_array_equal(ds.y, [1, 0, 1])
    assert ds.X.dtype == np.float64 and ds.y.dtype == np.int64


def test_string_column_is_one_hot_and_string_labels_encoded(tmp_path):
    text = "1.5,Present,van \n2.5, Absent,bus\n3.5,Present, van\n"
    ds = load_keel(_write(tmp_path, "cat", text))
    assert ds.feature_names == ["x0", "x1=Absent", "x1=Present"]
    np.testing.assert_array_equal(ds.X, [[1.5, 0, 1], [2.5, 1, 0], [3.5, 0, 1]])
    assert ds.class_names == ["bus", "van"]
    np.testing.assert_array_equal(ds.y, [1, 0, 1])


@pytest.mark.parametrize(
    ("text", "line", "what"),
    [
        ("1,2,a\n3,4,b\n5,6,7,a\n", 3, "expected 3 fields"),
        ("1,2,a\n3,,b\n", 2, "empty field"),
        ("1,2,a\n3,x,b\n5,6,a\n", 2, "column 1 is numeric"),
        ("1,nan,a\n3,4,b\n", 1, "not finite"),
    ],
)
def test_malformed_line_error_names_file_and_line(tmp_path, text, line, what):
    path = _write(tmp_path, "bad", text)
    with pytest.raises(ValueError, match=what) as info:
        load_keel(path)
    assert str(path) in str(info.value) and f"line {line}:" in str(info.value)


def test_missing_file_and_single_class(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.dat"):
        load_keel(tmp_path / "nope.dat")
    with pytest.raises(ValueError, match="two classes"):
        load_keel(_write(tmp_path, "one", "1,a\n2,a\n"))


def test_list_datasets_and_default_root(tmp_path, monkeypatch):
    _write(tmp_path, "b", "1,a\n2,b\n")
    _write(tmp_path, "a", "1,a\n2,b\n")
    assert list_datasets(tmp_path) == ["a", "b"]
    (tmp_path / "INDEX.tsv").write_text("name\tn\nb\t2\na\t2\n")
    assert list_datasets(tmp_path) == ["b", "a"]
    with pytest.raises(FileNotFoundError):
        list_datasets(tmp_path / "missing")
    monkeypatch.setenv("FERL_DATA_ROOT", str(tmp_path))
    assert default_data_root() == tmp_path / "tabular"


@pytest.mark.skipif(SHARED is None or not SHARED.is_dir(), reason="KEEL data not present")
def test_real_files_match_index():
    with (SHARED / "INDEX.tsv").open() as handle:
        index = list(csv.DictReader(handle, delimiter="\t"))
    for row in index:
        ds = load_keel(SHARED / row["file"])
        extra = 1 if row["name"] == "saheart" else 0  # famhist -> two one-hot columns
        assert ds.X.shape == (int(row["n"]), int(row["d"]) + extra), row["name"]
        assert ds.n_classes == int(row["k"]), row["name"]


def test_splits_sizes_disjoint_stratified_and_seeded():
    y = np.repeat([0, 1, 2], [60, 30, 10])
    splits = make_splits(y, n_folds=5, seed=3)
    assert len(splits) == 5
    np.testing.assert_array_equal(np.sort(np.concatenate([s.test for s in splits])), np.arange(100))
    for s in splits:
        assert len(s.test) == 20
        assert not set(s.fit) & set(s.cal) and not (set(s.fit) | set(s.cal)) & set(s.test)
        assert len(s.fit) + len(s.cal) == 80
        # stratified test fold and 25 % calibration reserve per class
        np.testing.assert_array_equal(np.bincount(y[s.test], minlength=3), [12, 6, 2])
        np.testing.assert_array_equal(np.bincount(y[s.cal], minlength=3), [12, 6, 2])
        assert len(s.cal) == 20  # 25 % of 80
    again = make_splits(y, n_folds=5, seed=3)
    assert all(np.array_equal(a.cal, b.cal) for a, b in zip(splits, again, strict=True))
    other = make_splits(y, n_folds=5, seed=4)
    assert not all(np.array_equal(a.test, b.test) for a, b in zip(splits, other, strict=True))


def test_splits_keep_tiny_classes_in_fit_part():
    y = np.array([0] * 20 + [1] * 20 + [2] * 2)  # like ecoli's two-member classes
    for s in make_splits(y, n_folds=5, seed=0):
        train_classes = set(y[np.r_[s.fit, s.cal]])
        assert train_classes <= set(y[s.fit])
    with pytest.raises(ValueError, match="n_folds"):
        make_splits(y, n_folds=1)


def test_scaling_fitted_on_fit_part_only():
    X = np.arange(20, dtype=float).reshape(10, 2)
    y = np.array([0, 1] * 5)
    split = make_splits(y, n_folds=2, seed=0)[0]
    data = scale_fold(X, y, split, 2)
    assert data.X_fit.min() == 0.0 and data.X_fit.max() == 1.0
    lo, hi = X[split.fit].min(axis=0), X[split.fit].max(axis=0)
    np.testing.assert_allclose(data.X_test, (X[split.test] - lo) / (hi - lo))
    np.testing.assert_array_equal(data.y_cal, y[split.cal])
