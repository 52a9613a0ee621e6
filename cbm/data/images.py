"""Image files decoded the same way everywhere, as a viewer shows them: turned upright by their
EXIF orientation, transparent pixels on white, 8-bit RGB, 16-bit and float images scaled, large
images reduced while decoding.

``Image.convert("RGB")`` clips instead of scaling: a 16-bit greyscale PNG (mode ``I;16``, values up
to 65535) came out as a blank white image, and nothing said so. :func:`to_rgb` scales such images
to 8 bits (16-bit: ``v / 257``, so 65535 is 255) and refuses what it cannot read as an image
(negative or out-of-range values) with a message. :func:`open_rgb` decodes a file and, given
``min_side``, reduces a large image while decoding (JPEG: DCT scaling with ``Image.draft``; other
formats: an integer box reduction right after decoding) to the smallest size whose shorter side is
still at least ``min_side``: a 10,000 x 10,000 photo needs no more than what the detector's resize
and the page's figure use.

A photo's pixels are stored as the camera held it; its EXIF orientation tag says how to turn them
upright, and every viewer does: :func:`to_rgb` turns them too (``ImageOps.exif_transpose``), so the
detector sees the photo the user sees. Transparent pixels (an alpha channel, or a palette or colour
key marking a colour transparent) are composited onto white, as a viewer on a white page shows
them: an image transparent everywhere reads as a white image, never as the hidden colours under
its alpha.
"""

from __future__ import annotations

import math
import os

import numpy as np
from PIL import ExifTags, Image, ImageOps

from .common import UnreadableImageError

__all__ = ["open_rgb", "to_rgb"]

#: Integer modes holding 16-bit samples (PNG, TIFF).
_MODES_16 = ("I;16", "I;16L", "I;16B", "I;16N")
#: Modes with an alpha channel (premultiplied ones included).
_ALPHA_MODES = ("RGBA", "LA", "PA", "RGBa", "La")
#: Modes that ``Image.reduce`` cannot average (palette indices, bilevel): converted before reducing.
_UNREDUCIBLE = ("P", "PA", "1")


def _reduce(img: Image.Image, min_side: int | None) -> Image.Image:
    """``img`` reduced by the largest integer factor that keeps its shorter side >= ``min_side``."""
    if min_side is None:
        return img
    factor = min(img.size) // max(1, int(min_side))
    return img.reduce(factor) if factor >= 2 else img


def _upright(img: Image.Image) -> Image.Image:
    """``img`` turned as its EXIF orientation tag says (itself when the tag is absent or 1)."""
    if img.getexif().get(ExifTags.Base.Orientation, 1) in range(2, 9):
        return ImageOps.exif_transpose(img)
    return img


def _on_white(img: Image.Image) -> Image.Image:
    """``img`` as RGB, its transparent pixels composited onto a white background."""
    if img.mode not in _ALPHA_MODES:
        return img.convert("RGB")
    rgba = img.convert("RGBA")
    return Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba).convert("RGB")


def to_rgb(img: Image.Image, min_side: int | None = None, name: str = "image") -> Image.Image:
    """A PIL image as 8-bit RGB, reduced by an integer factor to a shorter side >= ``min_side``.

    Parameters
    ----------
    img : PIL.Image.Image
        Any mode, turned upright first when its EXIF orientation tag says so. 16-bit integer images
        (``I;16*``, or ``I`` with values above 255) are scaled by 1/257; ``I`` images with values in
        [0, 255] are taken as 8-bit; float images (``F``) must hold values in [0, 1] (scaled by 255).
        Images with transparency (an alpha channel, or a transparent palette entry or colour) are
        composited onto white; other modes go through ``convert("RGB")``.
    min_side : int, optional
        Keep the shorter side at least this long (no reduction when None or when the image is less
        than twice as large).
    name : str
        What the messages call the image (its file).

    Returns
    -------
    PIL.Image.Image
        Mode ``RGB``.

    Raises
    ------
    UnreadableImageError
        An integer image with negative values or values above 65535, or a float image with values
        outside [0, 1] or not finite (the range found is named).
    """
    img = _upright(img)
    if img.mode in _MODES_16 or img.mode in ("I", "F"):
        sixteen = img.mode in _MODES_16
        img = _reduce(img.convert("I") if sixteen else img, min_side)  # reduce reads no I;16
        a = np.asarray(img, dtype=np.float64)
        lo, hi = (float(a.min()), float(a.max())) if a.size else (0.0, 0.0)
        if img.mode == "F":
            if not (math.isfinite(lo) and math.isfinite(hi) and 0.0 <= lo and hi <= 1.0):
                raise UnreadableImageError(f"cannot read image {name}: a floating-point image with values in "
                                           f"[{lo:.4g}, {hi:.4g}]; only [0, 1] is read: save it as an 8- or "
                                           "16-bit image")
            a = a * 255.0
        elif lo < 0 or hi > 65535:
            raise UnreadableImageError(f"cannot read image {name}: a {img.mode} image with values in "
                                       f"[{lo:.0f}, {hi:.0f}]; only 8-bit (0-255) and 16-bit (0-65535) "
                                       "images are read")
        elif sixteen or hi > 255:
            a = a / 257.0
        grey = Image.fromarray(np.clip(np.rint(a), 0, 255).astype(np.uint8), mode="L")
        return grey.convert("RGB")
    if img.mode in _UNREDUCIBLE or "transparency" in img.info:  # a palette or colour key: to colours
        clear = img.mode in _ALPHA_MODES or "transparency" in img.info
        img = img.convert("RGBA" if clear else "RGB")
    return _on_white(_reduce(img, min_side))


def open_rgb(path: str | os.PathLike, min_side: int | None = None) -> Image.Image:
    """Decode an image file as 8-bit RGB (see :func:`to_rgb`), reduced while decoding when
    ``min_side`` is given.

    Raises
    ------
    UnreadableImageError
        Values that :func:`to_rgb` refuses (the file is named).
    Exception
        What PIL raises for a missing or undecodable file (several types): callers name the file
        in their own words.
    """
    with Image.open(path) as img:
        if min_side is not None and img.format == "JPEG":
            scale = min(img.size) / max(1, int(min_side))
            if scale >= 2:  # DCT scaling by 1/2, 1/4 or 1/8, never below the size asked for
                img.draft("RGB", (math.ceil(img.size[0] / scale), math.ceil(img.size[1] / scale)))
        return to_rgb(img, min_side, str(path))
