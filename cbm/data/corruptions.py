"""ImageNet-C corruptions of images, named and graded as in Hendrycks & Dietterich (2019).

The 15 common corruptions in four groups (noise, blur, weather, digital) are the ones evaluated;
the 4 held-apart validation corruptions are the only ones any setting may be chosen on. The pixels
come from the maintained ``imagecorruptions`` package (the ``imagecorruptions-imaug`` release, which
runs on current scikit-image and NumPy); this module adds the names, the checks and the seeding.

Each call is seeded: the same image, corruption, severity and seed give the same pixels. The
package draws from NumPy's global generator (and, for ``impulse_noise`` and ``glass_blur``, from a
seed argument); `corrupt` seeds both and puts the global generator's state back afterwards, so a
caller's own draws are unaffected.
"""

from __future__ import annotations

import inspect
import warnings
import zlib
from collections.abc import Sequence
from numbers import Integral
from typing import Any

import numpy as np
import torch
from PIL import Image

from .datamodule import IMAGENET_MEAN, IMAGENET_STD, eval_crop, normalisation
from .tables import ConceptDataset, SampleTable

__all__ = ["CORRUPTIONS", "GROUPS", "SEVERITIES", "VALIDATION", "CorruptedDataset", "check_corruptions",
           "check_severities", "corrupt", "corruption_seed"]

#: Group of each corruption: the 15 common ones, evaluated (ImageNet-C's order).
GROUPS: dict[str, str] = {
    "gaussian_noise": "noise", "shot_noise": "noise", "impulse_noise": "noise",
    "defocus_blur": "blur", "glass_blur": "blur", "motion_blur": "blur", "zoom_blur": "blur",
    "snow": "weather", "frost": "weather", "fog": "weather", "brightness": "weather",
    "contrast": "digital", "elastic_transform": "digital", "pixelate": "digital",
    "jpeg_compression": "digital",
}
#: The evaluated corruptions, in ImageNet-C's order.
CORRUPTIONS: tuple[str, ...] = tuple(GROUPS)
#: ImageNet-C's held-apart validation corruptions, one per group: the only ones settings are chosen on.
VALIDATION: dict[str, str] = {"speckle_noise": "noise", "gaussian_blur": "blur", "spatter": "weather",
                              "saturate": "digital"}
#: Severity levels (0, the clean image, is not a corruption).
SEVERITIES = (1, 2, 3, 4, 5)
#: The smallest side the package accepts.
MIN_SIDE = 32


def check_corruptions(names: Sequence[str], allowed: Sequence[str] | None = None) -> list[str]:
    """``names`` as a list when each is a known corruption (of ``allowed``, default every evaluated and
    validation corruption) and none repeats, else ValueError naming the unknown ones and the choices."""
    allowed = list(CORRUPTIONS) + list(VALIDATION) if allowed is None else list(allowed)
    if isinstance(names, str):
        names = [names]
    names = [str(n) for n in names]
    unknown = [n for n in names if n not in allowed]
    if unknown:
        raise ValueError(f"unknown corruption(s) {unknown}; choose among {allowed}")
    if not names or len(set(names)) != len(names):
        raise ValueError(f"corruptions must be a non-empty list without repeats, got {names}")
    return names


def check_severities(severities: Sequence[int]) -> list[int]:
    """``severities`` as a sorted list when each is an integer in 1-5, else ValueError naming them."""
    bad = [s for s in severities if isinstance(s, bool) or not isinstance(s, Integral) or s not in SEVERITIES]
    if bad or not list(severities):
        raise ValueError(f"severities must be integers in 1-5 (0 is the clean image), got {list(severities)}")
    return sorted({int(s) for s in severities})


def corruption_seed(seed: int, name: str, severity: int, sample_id: str) -> int:
    """The seed of one corrupted image: a 31-bit mix of the run's ``seed``, the corruption, its severity
    and the image's ``sample_id``, stable across processes and platforms (CRC-32, not Python's
    ``hash``), so an image gets the same pixels in any subset of the split."""
    return zlib.crc32(f"{int(seed)}/{name}/{int(severity)}/{sample_id}".encode()) & 0x7FFFFFFF


def _package():
    try:
        import imagecorruptions
    except ImportError as err:  # a dependency of the project: only a broken install lacks it
        raise ImportError("corrupting images needs the imagecorruptions package, a dependency of ferl-cbm "
                          "(pip install imagecorruptions-imaug, or reinstall the project)") from err
    return imagecorruptions


def corrupt(image: np.ndarray, name: str, severity: int, seed: int) -> np.ndarray:
    """One image with one ImageNet-C corruption at one severity, seeded.

    Parameters
    ----------
    image : ndarray of shape (H, W, 3), uint8
        RGB pixels, both sides at least 32.
    name : str
        One of `CORRUPTIONS` or `VALIDATION`.
    severity : int in 1-5
    seed : int
        Seeds every random draw of the corruption (`corruption_seed` gives one per image).

    Returns
    -------
    ndarray of shape (H, W, 3), uint8

    Raises
    ------
    ValueError
        An unknown corruption, a severity outside 1-5, or an image that is not (H, W, 3) uint8 with
        both sides at least 32.
    ImportError
        The ``imagecorruptions`` package is missing (a broken install).
    """
    check_corruptions([name])
    check_severities([severity])
    image = np.asarray(image)
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3 or min(image.shape[:2]) < MIN_SIDE:
        raise ValueError(f"corrupt needs an (H, W, 3) uint8 image with both sides >= {MIN_SIDE}, got "
                         f"{image.shape} {image.dtype}")
    package = _package()
    function = package.corruption_dict[name]
    kwargs = {"seed": int(seed)} if "seed" in inspect.signature(function).parameters else {}
    state = np.random.get_state()  # noqa: NPY002 -- the package draws from the global generator
    try:
        np.random.seed(int(seed))  # noqa: NPY002
        with np.errstate(all="ignore"), warnings.catch_warnings():  # the package's 0/0 on flat images
            warnings.simplefilter("ignore", RuntimeWarning)
            out = package.corrupt(image, severity=int(severity), corruption_name=name, **kwargs)
    finally:
        np.random.set_state(state)  # noqa: NPY002
    return np.ascontiguousarray(out[..., :3], dtype=np.uint8)


class CorruptedDataset(ConceptDataset):
    """Rows of an image table, each cropped as for evaluation, corrupted, then normalised.

    ImageNet-C's order: the corruption acts on the evaluation crop (`cbm.data.eval_crop`), the
    normalisation (`cbm.data.normalisation`) follows, so a clean image would give exactly the
    evaluation transform's tensor. Items are ``(image float32 (3, S, S), concepts, class)``.

    Parameters
    ----------
    table : SampleTable
        An image table (``kind == "image"``).
    indices : ndarray of shape (n,), int
        Its rows.
    corruptions, severities : sequence of str, sequence of int, each of length n
        The corruption and severity of each row (the same image may appear several times).
    seed : int
        Seeds every image's corruption (`corruption_seed` of its sample id).
    image_size : int
    eval_crop_fraction : float in (0, 1]
    mean, std : sequence of float
        The normalisation of the data module.

    Raises
    ------
    ValueError
        Not an image table, lengths that differ, an unknown corruption or a severity outside 1-5.
    """

    def __init__(self, table: SampleTable, indices: np.ndarray, corruptions: Sequence[str],
                 severities: Sequence[int], seed: int, image_size: int, eval_crop_fraction: float = 0.875,
                 mean: Sequence[float] = IMAGENET_MEAN, std: Sequence[float] = IMAGENET_STD) -> None:
        if table.kind != "image":
            raise ValueError(f"corruptions apply to images; the {table.name!r} data set holds "
                             f"{table.kind} rows")
        super().__init__(table, indices)
        if not len(corruptions) == len(severities) == len(self.indices):
            raise ValueError("one corruption and one severity per row are needed")
        check_corruptions(sorted(set(corruptions)))
        check_severities(list(severities))
        self.corruptions, self.severities = [str(c) for c in corruptions], [int(s) for s in severities]
        self.seed = int(seed)
        self.crop, self.normalise = eval_crop(image_size, eval_crop_fraction), normalisation(mean, std)

    def __getitem__(self, item: int) -> tuple[Any, torch.Tensor, int]:
        i = int(self.indices[item])
        image = self.table.load(i)
        if isinstance(image, Image.Image):
            image = image.convert("RGB")
        pixels = self.crop(image).permute(1, 2, 0).numpy()
        name, severity = self.corruptions[item], self.severities[item]
        out = corrupt(np.ascontiguousarray(pixels), name, severity,
                      corruption_seed(self.seed, name, severity, str(self.table.sample_ids[i])))
        x = self.normalise(torch.tensor(out).permute(2, 0, 1).contiguous())  # a copy: `out` may be read-only
        return x, torch.from_numpy(self.table.concepts[i].astype(np.float32)), int(self.table.y[i])
