"""Image decoding shared by the data sets and predict (cbm.data.images): 16-bit and float images
scaled to 8 bits, not clipped to white; large images reduced while decoding; EXIF orientation and
transparency read as a viewer shows them."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from cbm.data import UnreadableImageError, build_transform, load_custom
from cbm.data.images import open_rgb, to_rgb
from cbm.data.validate import main as validate_main
from cbm.heads import make_head
from cbm.predict import Pipeline
from cbm.predict.inputs import read_image
from cbm.predict.output import PAGE_IMAGE_SIDE, write_predictions

#: A 16-bit grey ramp: 0 ... 65535 across, the 8-bit values 0 ... 255 after scaling.
RAMP = np.repeat(np.linspace(0, 65535, 16).round().astype(np.uint16)[None, :], 8, axis=0)


def _png16(path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(RAMP).save(path)
    assert Image.open(path).mode == "I;16"


def test_a_16_bit_png_is_scaled_to_8_bits_not_clipped_to_white(tmp_path):
    _png16(tmp_path / "grey16.png")
    rgb = np.asarray(open_rgb(tmp_path / "grey16.png"))
    assert rgb.shape == (8, 16, 3) and rgb.dtype == np.uint8
    expected = np.rint(RAMP / 257).astype(np.uint8)  # 0, 17, 34, ... 255
    np.testing.assert_array_equal(rgb[..., 0], expected)
    assert (rgb[..., 0] == rgb[..., 2]).all() and rgb.mean() < 200  # was 254.5: all but one pixel white
    np.testing.assert_array_equal(read_image(tmp_path / "grey16.png"), rgb)  # predict reads it the same
    np.testing.assert_array_equal(read_image(Image.open(tmp_path / "grey16.png")), rgb)


def test_a_custom_data_set_of_16_bit_images_loads_them_scaled(tmp_path):
    for c in ("a", "b"):
        for i in range(3):
            _png16(tmp_path / "images" / c / f"{i}.png")
    (tmp_path / "concepts.csv").write_text("class,x\na,1\nb,0\n")
    table = load_custom(tmp_path, check_images=True)
    np.testing.assert_array_equal(np.asarray(table.load(0))[..., 1], np.rint(RAMP / 257).astype(np.uint8))


@pytest.mark.parametrize(("array", "mode", "message"), [
    (np.full((4, 4), 70000, np.int32), "I", r"values in \[70000, 70000\]; only 8-bit .* and 16-bit"),
    (np.full((4, 4), -3, np.int32), "I", r"values in \[-3, -3\]"),
    (np.full((4, 4), 2.5, np.float32), "F", r"floating-point image with values in \[2.5, 2.5\]"),
])
def test_values_that_are_no_image_are_refused_by_name(tmp_path, array, mode, message, capsys):
    img = Image.fromarray(array)
    assert img.mode == mode
    with pytest.raises(UnreadableImageError, match=message):
        to_rgb(img, name="x.tif")
    for c in ("a", "b"):
        for i in range(2):
            (tmp_path / "images" / c).mkdir(parents=True, exist_ok=True)
            Image.fromarray(np.full((4, 4), 100, np.uint8)).save(tmp_path / "images" / c / f"{i}.tif")
    img.save(tmp_path / "images" / "a" / "0.tif")
    (tmp_path / "concepts.csv").write_text("class,x\na,1\nb,0\n")
    assert validate_main([str(tmp_path)]) == 1  # validate refuses what training cannot read
    assert "cannot read image" in capsys.readouterr().out


def test_8_bit_grey_values_in_an_int_or_float_image_keep_their_meaning():
    for value, dtype, expected in ((200, np.int32, 200), (0.5, np.float32, 128)):
        rgb = np.asarray(to_rgb(Image.fromarray(np.full((2, 2), value, dtype))))
        assert (rgb == expected).all()


def _photo(path, size=(2400, 1800)) -> np.ndarray:
    """A smooth colour image (a photo compresses like this, noise would not)."""
    yy, xx = np.mgrid[0:size[1], 0:size[0]]
    rgb = np.stack([xx * 255 // size[0], yy * 255 // size[1], (xx + yy) * 255 // sum(size)], -1)
    rgb = rgb.astype(np.uint8)
    Image.fromarray(rgb).save(path, quality=90)
    return rgb


@pytest.mark.parametrize("suffix", [".png", ".jpg"])
def test_a_large_image_is_reduced_while_decoding_to_what_is_needed(tmp_path, suffix):
    # a 10,000 x 10,000 photo took 8.2 GB in predict with the page (decoded, resized, drawn at full size)
    full = _photo(tmp_path / f"big{suffix}")
    small = read_image(tmp_path / f"big{suffix}", min_side=146)  # synthetic runs: 2 x 73 px
    assert 146 <= min(small.shape[:2]) < 2 * 146 and small.shape[1] * 3 == small.shape[0] * 4  # 4:3 kept
    assert read_image(tmp_path / f"big{suffix}").shape == full.shape  # no min_side: as before
    assert read_image(tmp_path / f"big{suffix}", min_side=2000).shape == full.shape  # never below it
    transform = build_transform(64, train=False)
    # what the detector sees differs by a fraction of a grey level (normalised units: 1/255/0.226 = 0.017)
    diff = (transform(small) - transform(read_image(tmp_path / f"big{suffix}"))).abs()
    assert float(diff.mean()) < 0.02
    assert 146 <= min(read_image(Image.open(tmp_path / f"big{suffix}"), min_side=146).shape[:2]) < 2 * 146


def test_predict_decodes_for_the_detector_and_the_page_at_reduced_size(tmp_path, monkeypatch):
    sides = []
    real = read_image

    def spy(image, min_side=None):
        sides.append(min_side)
        return real(image, min_side)

    monkeypatch.setattr("cbm.predict.pipeline.read_image", spy)
    monkeypatch.setattr("cbm.predict.output.read_image", spy)
    head = make_head("ferl-compact").fit(np.random.default_rng(0).random((40, 2)), np.repeat(["a", "b"], 20),
                                         ["p", "q"])
    detector = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.LazyLinear(2))
    pipe = Pipeline(run_dir=tmp_path, head_name="ferl-compact", inputs="raw", head=head, calibrator=None,
                    threshold={"kind": "typical", "accept": 0.95, "value": 1.0, "fitted_on": "val", "n": 40},
                    detector=detector, transform=build_transform(32, train=False), device=torch.device("cpu"),
                    decode_side=74)
    _photo(tmp_path / "big.jpg", (800, 600))
    pred = pipe.predict([tmp_path / "big.jpg"])
    write_predictions(pred, tmp_path / "out")
    assert sides == [74, PAGE_IMAGE_SIDE]


def _marked(size=(6, 4)) -> np.ndarray:
    """An RGB image whose every pixel differs (so a turn or a flip shows)."""
    return np.arange(size[0] * size[1] * 3, dtype=np.uint8).reshape(size[1], size[0], 3)


def test_an_exif_orientation_turns_the_image_upright_as_a_viewer_does(tmp_path):
    pixels = _marked()
    exif = Image.new("RGB", (1, 1)).getexif()
    exif[0x0112] = 6  # Orientation: the stored pixels are to be turned 90 degrees clockwise
    Image.fromarray(pixels).save(tmp_path / "phone.png", exif=exif)
    upright = np.rot90(pixels, k=-1)
    np.testing.assert_array_equal(np.asarray(open_rgb(tmp_path / "phone.png")), upright)  # the loaders
    np.testing.assert_array_equal(read_image(tmp_path / "phone.png"), upright)  # predict
    np.testing.assert_array_equal(read_image(Image.open(tmp_path / "phone.png")), upright)
    _photo(tmp_path / "wide.jpg", (800, 600))
    with Image.open(tmp_path / "wide.jpg") as img:
        img.save(tmp_path / "phone.jpg", exif=exif, quality=90)
    assert read_image(tmp_path / "phone.jpg", min_side=146).shape[:2] == (200, 150)  # reduced, upright


@pytest.mark.parametrize(("mode", "alpha", "expected"), [
    ("RGBA", 0, (255, 255, 255)),  # transparent everywhere: white, not the hidden red
    ("RGBA", 255, (200, 0, 0)),
    ("RGBA", 128, (227, 128, 128)),  # half over white
    ("LA", 0, (255, 255, 255)),
])
def test_transparent_pixels_are_composited_onto_white(tmp_path, mode, alpha, expected):
    rgba = np.zeros((3, 5, 4), np.uint8)
    rgba[..., 0], rgba[..., 3] = 200, alpha
    img = Image.fromarray(rgba).convert(mode)
    img.save(tmp_path / "a.png")
    for read in (read_image(tmp_path / "a.png"), read_image(img), np.asarray(open_rgb(tmp_path / "a.png"))):
        np.testing.assert_allclose(read, np.broadcast_to(expected, (3, 5, 3)), atol=1)


def test_a_palette_with_a_transparent_entry_reads_white_there(tmp_path):
    img = Image.fromarray(np.array([[0, 1]], np.uint8), mode="L").convert("P")
    img.putpalette([200, 0, 0, 0, 0, 200])
    img.info["transparency"] = 0
    img.save(tmp_path / "p.png")
    assert read_image(tmp_path / "p.png").tolist() == [[[255, 255, 255], [0, 0, 200]]]


@pytest.mark.parametrize(("array", "mode"), [
    (np.full((600, 400), 257 * 40, np.uint16), "I;16"),
    (np.full((600, 400), 40, np.uint8), "P"),
    (np.zeros((600, 400), bool), "1"),
])
def test_large_16_bit_palette_and_bilevel_images_are_reduced_not_refused(tmp_path, array, mode):
    # Image.reduce reads none of these modes: "cannot read image: image has wrong mode" in predict
    img = Image.fromarray(array)
    img = img.convert("P") if mode == "P" else img
    img.save(tmp_path / "big.png")
    assert Image.open(tmp_path / "big.png").mode == mode
    small = read_image(tmp_path / "big.png", min_side=146)
    assert small.shape == (300, 200, 3) and (small == (0 if mode == "1" else 40)).all()
