"""scripts/sample_images.py: its file names and its refusal of a folder that holds images."""

import runpy
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "sample_images.py"
module = runpy.run_path(str(SCRIPT))


@pytest.mark.parametrize(("split", "name", "want"), [
    ("novel", "novel_00", "novel_00_03.png"),  # was novel_novel_00_03.png
    ("test", "class_06", "test_class_06_03.png"),
    ("test", "novel_00", "test_novel_00_03.png"),
])
def test_file_names_hold_the_split_once(split, name, want):
    assert module["file_name"](split, name, 3) == want


def test_a_folder_that_holds_images_is_refused_before_the_run_is_read(tmp_path):
    # predict --folder reads every image under the folder: leftovers would be predicted too
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "left_over.JPG").write_bytes(b"")
    with pytest.raises(ValueError, match=r"holds 1 image\(s\) already .*left_over\.JPG"):
        module["sample_images"](tmp_path / "no_such_run", tmp_path)
