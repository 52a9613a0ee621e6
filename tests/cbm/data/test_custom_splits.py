"""Custom data sets: split names read whole (issue 34, bug 6), validate refusing the splits training
refuses (bug 7), and files that are not regular files skipped (bug 9)."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from cbm.data import DataFormatError, load_custom


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
