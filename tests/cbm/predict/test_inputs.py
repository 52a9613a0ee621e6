"""What predict reads from files made elsewhere: the smaller points of issue 34 (a concepts CSV in
upper case, not UTF-8 or with a column twice; a text file named .npz)."""

from __future__ import annotations

import pytest

from cbm.predict.inputs import read_concepts_file

NAMES = ["colour::red", "colour::blue"]


def test_a_concepts_csv_with_an_upper_case_suffix_is_read(tmp_path):
    (tmp_path / "c.CSV").write_text("sample_id,colour::blue,colour::red\na,0.25,0.5\n")
    given = read_concepts_file(tmp_path / "c.CSV", NAMES)
    assert given.ids == ["a"] and given.probs.tolist() == [[0.5, 0.25]]


@pytest.mark.parametrize(("name", "data", "message"), [
    ("c.csv", "sample_id,colour::red,colour::blue\nrouge é,0.5,0.5\n".encode("latin-1"),
     r"c.csv is not UTF-8 text \(byte 0xe9 is not UTF-8\): save it as UTF-8"),
    ("c.csv", b"sample_id,colour::red,colour::red,colour::blue\na,0.5,0.5,0.5\n",
     r"named twice in .*c.csv: \['colour::red'\]"),
    ("c.npz", b"sample_id,colour::red\n", r"c.npz is not a readable .npz concept table: not a zip archive"),
])
def test_a_bad_concepts_file_is_named_with_what_is_wrong(tmp_path, name, data, message):
    # were a bare UTF-8 codec error, "zip() argument 2 is shorter than argument 1" and "pickled data"
    (tmp_path / name).write_bytes(data)
    with pytest.raises(ValueError, match=message):
        read_concepts_file(tmp_path / name, NAMES)
