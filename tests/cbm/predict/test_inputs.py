"""What predict reads from files made elsewhere: the smaller points users reported (a concepts CSV in
upper case, not UTF-8 or with a column twice; a text file named .npz); images far smaller than the
detector's input; folder entries named as images that are no image file."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from cbm.data import UnreadableImageError, build_transform
from cbm.heads import make_head
from cbm.predict import run_predict
from cbm.predict.inputs import find_images, read_concepts_file, read_image
from cbm.predict.output import page_files
from cbm.predict.pipeline import Pipeline

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


class _Detector(torch.nn.Module):
    """A stand-in detector with `cbm.detector.ConceptDetector`'s features / head split."""

    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.LazyLinear(4))
        self.head = torch.nn.Linear(4, 2)

    def features(self, x):
        return self.body(x)

    def forward(self, x):
        return self.head(self.features(x))


def test_an_image_far_below_the_detectors_input_is_predicted_with_a_warning():
    head = make_head("ferl-compact").fit(np.random.default_rng(0).random((40, 2)), np.repeat(["a", "b"], 20),
                                         ["p", "q"])
    detector = _Detector()
    pipe = Pipeline(run_dir=Path("run"), head_name="ferl-compact", inputs="raw", head=head, calibrator=None,
                    threshold={"kind": "typical", "accept": 0.95, "value": 1.0, "fitted_on": "val", "n": 40},
                    detector=detector, transform=build_transform(32, train=False), device=torch.device("cpu"),
                    input_side=32)
    images = [np.full((1, 1, 3), 200, np.uint8), np.full((7, 40, 3), 200, np.uint8),
              np.full((8, 8, 3), 200, np.uint8), np.zeros((2, 2, 4), np.uint8)]
    pred = pipe.predict(images)
    warnings = [r["warning"] for r in pred.rows]
    assert warnings[0] == ("1x1 pixels, far below the detector's input of 32x32: upscaled, so its concepts "
                           "and class are unreliable")
    assert warnings[1].startswith("40x7 pixels") and warnings[2] is None  # 8 px: a quarter of 32
    assert warnings[3] is None and pred.rows[3]["error"] is not None  # unreadable: the error says it
    assert pred.rows[0]["class"] in ("a", "b")  # still predicted
    assert pred.frame()["warning"].tolist()[:2] == warnings[:2]  # a column of the table
    page, _ = page_files(pred)
    assert page.count("**Warning**: ") == 2 and f"**Warning**: {warnings[0]}." in page


def _odd_folder(folder: Path) -> None:
    """A folder with one image and image-named entries that are none: looping and broken links, a
    pipe, and a folder named like an image (whose image is found)."""
    (folder / "in.png").mkdir(parents=True)
    Image.new("RGB", (4, 4)).save(folder / "in.png" / "a.png")
    Image.new("RGB", (4, 4)).save(folder / "b.png")
    os.symlink("loop2.png", folder / "loop1.png")
    os.symlink("loop1.png", folder / "loop2.png")
    os.symlink("gone.png", folder / "broken.png")
    os.mkfifo(folder / "pipe.png")


def test_every_image_named_entry_of_a_folder_is_listed_and_says_what_it_is(tmp_path):
    _odd_folder(tmp_path)
    found = find_images(tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in found] == [
        "b.png", "broken.png", "in.png/a.png", "loop1.png", "loop2.png", "pipe.png"]  # loops were dropped
    messages = {}
    for p in found:
        try:
            assert read_image(p).shape == (4, 4, 3)
        except UnreadableImageError as err:
            messages[p.name] = str(err)
    assert messages == {
        "broken.png": f"{tmp_path / 'broken.png'}: a symbolic link to gone.png, which does not exist",
        "loop1.png": f"{tmp_path / 'loop1.png'}: a symbolic link that loops (it never reaches a file)",
        "loop2.png": f"{tmp_path / 'loop2.png'}: a symbolic link that loops (it never reaches a file)",
        "pipe.png": f"{tmp_path / 'pipe.png'}: not a regular file (a pipe, socket or device), not an "
                    "image file",
    }
    with pytest.raises(UnreadableImageError, match=r"in.png: a folder, not an image file \(predict --folder"):
        read_image(tmp_path / "in.png")


def test_a_folder_given_as_images_says_to_use_folder(tmp_path):
    (tmp_path / "photos").mkdir()
    with pytest.raises(ValueError, match=r"--images .*photos is a folder .*: use --folder .*photos"):
        run_predict(str(tmp_path / "no-run"), images=[str(tmp_path / "photos")])  # was "no such file"
    (tmp_path / "a.png").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match=r"a.png does not exist \(it is a file: use --images\)"):
        run_predict(str(tmp_path / "no-run"), folder=str(tmp_path / "a.png"))
