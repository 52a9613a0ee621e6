"""What ``predict`` reads: image files (listed or found in a folder), in-memory images, or concept
vectors made elsewhere (a concept table ``.npz`` or a CSV).

An image that cannot be read is not fatal: :func:`read_image` raises
:class:`~cbm.data.common.UnreadableImageError` naming the file, and the pipeline reports it on
that input's row.
"""

from __future__ import annotations

import csv
import errno
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from cbm.data.common import UnreadableImageError, not_utf8
from cbm.data.concept_tables import check_concept_names, load_concept_table
from cbm.data.custom import IMAGE_SUFFIXES
from cbm.data.images import open_rgb, to_rgb

__all__ = ["SMALL_INPUT_FACTOR", "ConceptInputs", "find_images", "not_a_file", "read_concepts_file",
           "read_image", "small_input_warning"]

#: An image whose shorter side is less than the detector's input side divided by this is upscaled so
#: far that its concepts are guesses: its row gets a ``warning``.
SMALL_INPUT_FACTOR = 4


def find_images(folder: str | os.PathLike) -> list[Path]:
    """Entries below ``folder`` (sub-folders included) named as images, sorted by path.

    Every entry with a suffix of :data:`IMAGE_SUFFIXES` that is not a folder is listed, readable or
    not (a broken or looping link, a pipe): each gets its row, and :func:`read_image` says what is
    wrong with the unreadable ones, so no image-named entry vanishes from the output.

    Raises
    ------
    FileNotFoundError
        ``folder`` is not a folder, or holds no entry with a suffix of :data:`IMAGE_SUFFIXES`.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"image folder {folder} does not exist"
                                + (" (it is a file: use --images)" if folder.exists() else ""))
    found = sorted(p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES and not p.is_dir())
    if not found:
        raise FileNotFoundError(f"no image files ({', '.join(IMAGE_SUFFIXES)}) in {folder}")
    return found


def not_a_file(path: str | os.PathLike) -> str | None:
    """What keeps ``path`` from being read as an image file, or None for a regular file.

    Returns
    -------
    str or None
        The path and what it is instead: missing, a folder, a link that loops or points nowhere, or
        a pipe, socket or device.
    """
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except OSError as err:
        if err.errno == errno.ELOOP:
            return f"{path}: a symbolic link that loops (it never reaches a file)"
        if path.is_symlink():
            return f"{path}: a symbolic link to {os.readlink(path)}, which does not exist"
        return f"{path}: " + ("no such file" if err.errno == errno.ENOENT else f"cannot read: {err.strerror}")
    if stat.S_ISDIR(mode):
        return f"{path}: a folder, not an image file (predict --folder reads the images in a folder)"
    if not stat.S_ISREG(mode):
        return f"{path}: not a regular file (a pipe, socket or device), not an image file"
    return None


def read_image(image: str | os.PathLike | Image.Image | np.ndarray,
               min_side: int | None = None) -> np.ndarray:
    """An input image as RGB uint8 of shape (H, W, 3).

    Parameters
    ----------
    image : path-like, PIL image or ndarray
        A file or a PIL image, read as a viewer shows it and as the training images were
        (:func:`cbm.data.images.to_rgb`): turned upright by its EXIF orientation, transparent
        pixels composited onto white, any mode converted to 8-bit RGB (16-bit images scaled); or
        an array of shape (H, W, 3) or (H, W) with dtype uint8, taken as given.
    min_side : int, optional
        A file or PIL image is reduced by the largest integer factor that keeps its shorter side at
        least this long, while decoding where the format allows (:func:`cbm.data.images.open_rgb`),
        so a huge photo never lies in memory at full size for long. Arrays are returned as given.

    Raises
    ------
    UnreadableImageError
        A missing or undecodable file, a path that is no regular file (:func:`not_a_file`), values
        that cannot be read as 8 bits, or an array of another shape or dtype (the message names
        the file or the shape).
    """
    if isinstance(image, np.ndarray):
        arr = np.stack([image] * 3, axis=-1) if image.ndim == 2 else image
        if arr.ndim != 3 or arr.shape[2] != 3 or arr.dtype != np.uint8 or 0 in arr.shape:
            raise UnreadableImageError(f"an image array must be uint8 of shape (H, W, 3) or (H, W), "
                                       f"got {image.dtype} {image.shape}")
        return arr if arr.flags.writeable else arr.copy()  # torch refuses read-only arrays
    if isinstance(image, Image.Image):
        return np.array(to_rgb(image, min_side))
    path = Path(image)
    if (problem := not_a_file(path)) is not None:
        raise UnreadableImageError(problem)
    try:
        return np.array(open_rgb(path, min_side))
    except UnreadableImageError:
        raise
    except Exception as err:  # PIL raises several types for bad data
        raise UnreadableImageError(f"{path}: cannot read image: {err}") from err


def small_input_warning(shape: tuple[int, ...], input_side: int | None) -> str | None:
    """Why an image is too small for its prediction to be trusted, or None.

    The detector resizes every image to ``input_side`` pixels; one whose shorter side is less than
    ``input_side / SMALL_INPUT_FACTOR`` becomes a few blurred blocks, and the head still gives it a
    class, often a confident one.

    Parameters
    ----------
    shape : tuple of int
        The decoded image's shape, (H, W) or (H, W, channels).
    input_side : int or None
        The detector's input side in pixels; None gives no warning.

    Returns
    -------
    str or None
        The image's size beside the detector's, for the row's ``warning``.
    """
    if input_side is None or min(shape[:2]) * SMALL_INPUT_FACTOR >= input_side:
        return None
    return (f"{shape[1]}x{shape[0]} pixels, far below the detector's input of {input_side}x{input_side}: "
            f"upscaled, so its concepts and class are unreliable")


@dataclass(frozen=True)
class ConceptInputs:
    """Concept vectors read by :func:`read_concepts_file`.

    Attributes
    ----------
    ids : list of str
        One identifier per row.
    probs : ndarray of shape (n, k), float32 in [0, 1]
        Detector probabilities in the run's concept order.
    true_class : list of str or None
        Class names from a concept table (None for a CSV).
    """

    ids: list[str]
    probs: np.ndarray
    true_class: list[str] | None = None


def read_concepts_file(path: str | os.PathLike, concept_names: Sequence[str]) -> ConceptInputs:
    """Read concept probabilities made elsewhere, in the run's concept order.

    Parameters
    ----------
    path : path-like
        A concept table ``.npz`` (``concepts/<split>.npz`` layout, see
        :mod:`cbm.data.concept_tables`; its concept names must be the run's, in order) or a ``.csv``
        with a header ``sample_id,<concept>,...``: one column per concept of the run, in any order,
        values in [0, 1].
    concept_names : sequence of str
        The run's concepts.

    Returns
    -------
    ConceptInputs

    Raises
    ------
    FileNotFoundError
        No such file.
    ValueError
        Another suffix, other concept names (missing and unexpected ones listed), an empty file, or
        a value that is not a number in [0, 1] (row and concept named).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"concepts file {path} does not exist")
    names = [str(n) for n in concept_names]
    suffix = path.suffix.lower()  # a spreadsheet may save X.CSV
    if suffix == ".npz":
        table = load_concept_table(path)
        check_concept_names(table.concept_names, names, source=str(path), reference="the run")
        return ConceptInputs([str(s) for s in table.sample_ids], table.probs,
                             [table.class_names[c] for c in table.y])
    if suffix != ".csv":
        raise ValueError(f"{path}: concepts must be a concept table (.npz) or a .csv file")
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:  # a spreadsheet's byte-order mark too
            rows = list(csv.reader(fh))
    except UnicodeDecodeError as err:
        raise not_utf8(path, err) from err
    if len(rows) < 2 or not rows[0] or rows[0][0] != "sample_id":
        raise ValueError(f"{path}: expected a header 'sample_id,<concept>,...' and at least one row")
    header = rows[0][1:]
    check_concept_names(sorted(header), sorted(names), source=str(path), reference="the run")
    order = [header.index(n) + 1 for n in names]
    probs = np.empty((len(rows) - 1, len(names)), dtype=np.float32)
    for i, row in enumerate(rows[1:]):
        if len(row) != len(rows[0]):
            raise ValueError(f"{path}: row {i + 2} has {len(row)} fields, the header {len(rows[0])}")
        for j, col in enumerate(order):
            try:
                value = float(row[col])
            except ValueError:
                value = float("nan")
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{path}: row {i + 2} ({row[0]!r}), concept {names[j]!r} is {row[col]!r} "
                                 "(must be a number in [0, 1])")
            probs[i, j] = value
    return ConceptInputs([row[0] for row in rows[1:]], probs)
