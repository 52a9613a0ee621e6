"""Concept tables: round trip, validation errors, name checks against checkpoints."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cbm.data.concept_tables import (
    SCHEMA_VERSION,
    ConceptTable,
    check_concept_names,
    load_concept_table,
    load_concept_tables,
    save_concept_table,
)
from cbm.detector.checkpoint import check_table_matches_checkpoint, checkpoint_concept_names
from ferl.io.persist import atomic_write_bytes

CONCEPTS = ["wing::red", "wing::blue", "beak::long"]
CLASSES = ["gull", "tern"]


def _arrays(n: int = 5, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "probs": rng.random((n, len(CONCEPTS))).astype(np.float32),
        "concept_labels": rng.integers(0, 2, (n, len(CONCEPTS))).astype(np.uint8),
        "y": rng.integers(0, len(CLASSES), n),
        "concept_names": CONCEPTS,
        "class_names": CLASSES,
        "sample_ids": [f"img{i}" for i in range(n)],
    }


def test_round_trip_keeps_values_dtypes_and_split(tmp_path):
    a = _arrays()
    save_concept_table(tmp_path / "concepts" / "val.npz", **a)
    t = load_concept_table(tmp_path / "concepts" / "val.npz")
    assert t.split == "val"
    np.testing.assert_array_equal(t.probs, a["probs"])
    np.testing.assert_array_equal(t.concept_labels, a["concept_labels"])
    np.testing.assert_array_equal(t.y, a["y"])
    assert (t.probs.dtype, t.concept_labels.dtype, t.y.dtype) == (np.float32, np.uint8, np.int64)
    assert t.concept_names == CONCEPTS and t.class_names == CLASSES
    assert t.sample_ids.tolist() == a["sample_ids"]
    assert (t.n_samples, t.n_concepts) == (5, 3)
    with np.load(tmp_path / "concepts" / "val.npz", allow_pickle=False) as z:  # no pickles
        assert int(z["schema_version"]) == SCHEMA_VERSION


def test_nan_probability_error_names_split_row_sample_and_concept(tmp_path):
    a = _arrays()
    a["probs"][3, 1] = np.nan
    with pytest.raises(ValueError, match=r"'test'.*row 3 \(sample 'img3'\).*'wing::blue'.*nan"):
        save_concept_table(tmp_path / "test.npz", **a)
    assert not (tmp_path / "test.npz").exists()


def test_load_rejects_corrupt_file_with_path_and_location(tmp_path):
    a = _arrays()
    t = ConceptTable(**a, split="train")
    path = t.save(tmp_path / "train.npz")
    with np.load(path) as z:
        data = dict(z)
    data["probs"][2, 2] = 1.5
    np.savez(path, **data)
    with pytest.raises(ValueError, match=r"train\.npz.*row 2 \(sample 'img2'\).*'beak::long'.*1\.5"):
        load_concept_table(path)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda a: a["concept_labels"].__setitem__((0, 0), 2), "must be 0 or 1"),
        (lambda a: a.update(probs=a["probs"][:, :2]), r"probs has shape \(5, 2\), expected \(5, 3\)"),
        (lambda a: a.update(y=np.array([0, 1, 2, 0, 1])), r"class indices in \[0, 2\)"),
        (lambda a: a.update(sample_ids=["a", "b", "a", "c", "d"]), "duplicated sample_ids: \\['a'\\]"),
        (lambda a: a.update(concept_names=["x", "x", "y"]), "duplicated concept_names"),
        (lambda a: a["probs"].__setitem__((1, 0), -np.inf), "not finite"),
    ],
)
def test_invalid_tables_are_rejected(change, message):
    a = _arrays()
    change(a)
    with pytest.raises(ValueError, match=message):
        ConceptTable(**a)


def test_missing_keys_and_other_schema_version_are_rejected(tmp_path):
    np.savez(tmp_path / "x.npz", probs=np.zeros((1, 1), np.float32))
    with pytest.raises(ValueError, match="not a concept table: missing"):
        load_concept_table(tmp_path / "x.npz")
    path = ConceptTable(**_arrays(), split="val").save(tmp_path / "val.npz")
    with np.load(path) as z:
        data = dict(z)
    data["schema_version"] = np.asarray(SCHEMA_VERSION + 1)
    np.savez(path, **data)
    with pytest.raises(ValueError, match="schema version 2"):
        load_concept_table(path)
    with pytest.raises(FileNotFoundError):
        load_concept_table(tmp_path / "absent.npz")


def test_atomic_write_replaces_whole_file_and_leaves_no_temp(tmp_path):
    target = tmp_path / "sub" / "f.bin"
    atomic_write_bytes(target, b"old")
    atomic_write_bytes(target, b"new content")
    assert target.read_bytes() == b"new content"
    assert sorted(p.name for p in target.parent.iterdir()) == ["f.bin"]


def test_check_concept_names_lists_the_difference():
    with pytest.raises(ValueError, match=r"missing from table: \['c'\]; not in ckpt: \['d'\]"):
        check_concept_names(["a", "b", "d"], ["a", "b", "c"], source="table", reference="ckpt")
    with pytest.raises(ValueError, match=r"another order.*\(0, 'b', 'a'\)"):
        check_concept_names(["b", "a"], ["a", "b"], source="table", reference="ckpt")
    check_concept_names(["a", "b"], ("a", "b"), source="table", reference="ckpt")  # no error


def test_table_against_checkpoint_names(tmp_path):
    table = ConceptTable(**_arrays(), split="test")
    ckpt = tmp_path / "det.ckpt"
    torch.save({"hyper_parameters": {"concept_names": CONCEPTS}}, ckpt)
    assert checkpoint_concept_names(ckpt) == CONCEPTS
    check_table_matches_checkpoint(table, ckpt)
    torch.save({"hyper_parameters": {"concept_names": [*CONCEPTS[:2], "tail::short"]}}, ckpt)
    with pytest.raises(ValueError, match=r"missing from concept table 'test': \['tail::short'\]"):
        check_table_matches_checkpoint(table, ckpt)


def test_load_concept_tables_checks_names_across_splits(tmp_path):
    for split in ("train", "val", "test"):
        save_concept_table(tmp_path / "concepts" / f"{split}.npz", **_arrays())
    tables = load_concept_tables(tmp_path)  # a run directory holding concepts/
    assert list(tables) == ["train", "val", "test"]
    other = _arrays()
    other["concept_names"] = ["wing::red", "wing::blue", "beak::short"]
    save_concept_table(tmp_path / "concepts" / "test.npz", **other)
    with pytest.raises(ValueError, match=r"concepts/test\.npz.*\['beak::long'\]"):
        load_concept_tables(tmp_path / "concepts")


@pytest.mark.parametrize("cut", [0, 200, -50])
def test_load_rejects_a_truncated_table(tmp_path, cut):
    path = tmp_path / "val.npz"
    probs = np.full((3, 2), 0.5)
    save_concept_table(path, probs=probs, concept_labels=np.zeros((3, 2), int), y=np.array([0, 1, 0]),
                       concept_names=["a", "b"], class_names=["x", "y"], sample_ids=["0", "1", "2"])
    blob = path.read_bytes()
    path.write_bytes(blob[:cut] if cut >= 0 else blob[:len(blob) + cut])
    with pytest.raises(ValueError, match="not a readable .npz concept table"):
        load_concept_table(path)


def test_load_rejects_a_non_scalar_schema_version(tmp_path):
    path = tmp_path / "val.npz"
    save_concept_table(path, probs=np.full((3, 2), 0.5), concept_labels=np.zeros((3, 2), int),
                       y=np.array([0, 1, 0]), concept_names=["a", "b"], class_names=["x", "y"],
                       sample_ids=["0", "1", "2"])
    data = dict(np.load(path))
    data["schema_version"] = np.array([1, 2])
    np.savez(path, **data)
    with pytest.raises(ValueError, match="schema version"):
        load_concept_table(path)


def test_concept_groups_are_saved_and_older_tables_get_them_from_the_names(tmp_path):
    path = tmp_path / "test.npz"
    saved = save_concept_table(path, **_arrays(), concept_groups={"colour": [0, 1], "bill": [2]})
    assert saved.concept_groups == load_concept_table(path).concept_groups == ["colour", "colour", "bill"]
    with np.load(path) as z:  # a table written before the key existed
        data = {k: z[k] for k in z.files if k != "concept_groups"}
    np.savez(path, **data)
    assert load_concept_table(path).concept_groups == ["wing", "wing", "beak"]
    with pytest.raises(ValueError, match=r"concepts \[2\] without a group"):
        save_concept_table(path, **_arrays(), concept_groups={"wing": [0, 1]})
    with pytest.raises(ValueError, match="concept_groups must name a non-empty group"):
        ConceptTable(**_arrays(), concept_groups=["wing", "wing"])
