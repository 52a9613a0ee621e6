"""Write the tiny bring-your-own-data example of ``datasets/custom/README.md``.

Five classes of coloured shapes with 8 images each in ``images/<class>/`` and a per-class
``concepts.csv`` with three concept groups (``colour::red|blue``, ``shape::circle|square``,
``count::one|two``): ``red_circle``, ``blue_circle``, ``red_square`` (one object each),
``red_circles`` and ``blue_squares`` (two objects each); and 6 images of a class never trained on,
``blue_square`` (one blue square), in ``new_images/`` for ``predict``: 46 PNG files of 32 x 32
pixels, drawn with PIL from a seed.

``blue_square`` is a new combination of known concepts, and each pair of its concepts was seen
together in training (blue squares in pairs, single blue circles, single red squares): a detector
trained on per-class concepts only learns a concept apart from the others it co-occurs with where
the training classes vary them independently. With only ``red_circle``, ``blue_circle`` and
``red_square`` (an earlier version of the example), a small detector read every blue square as a circle
("blue" had only ever come with "circle"), and no head can flag what the concepts do not show.

Examples
--------
    python scripts/make_custom_example.py datasets/custom/example
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

CONCEPTS = ["colour::red", "colour::blue", "shape::circle", "shape::square", "count::one", "count::two"]
CLASSES = {"red_circle": (1, 0, 1, 0, 1, 0), "blue_circle": (0, 1, 1, 0, 1, 0),
           "red_square": (1, 0, 0, 1, 1, 0), "red_circles": (1, 0, 1, 0, 0, 1),
           "blue_squares": (0, 1, 0, 1, 0, 1)}
NEW_CLASS = ("blue_square", (0, 1, 0, 1, 1, 0))


def draw(values: tuple[int, ...], rng: np.random.Generator, size: int = 32) -> Image.Image:
    """One image: one or two red or blue circles or squares (jittered position, size, shade) on noise.

    Parameters
    ----------
    values : tuple of 6 int
        0/1 per concept of `CONCEPTS`.
    rng : numpy Generator
    size : int
        Image side in pixels.
    """
    background = rng.integers(150, 230, size=(size, size, 3), dtype=np.uint8)
    img = Image.fromarray(background)
    shade = int(rng.integers(150, 256))
    colour = (shade, 30, 30) if values[0] else (30, 30, shade)
    pen = ImageDraw.Draw(img)
    if values[4]:  # one object
        r = rng.uniform(0.22, 0.30) * size
        centres = [rng.uniform(r + 1, size - r - 1, size=2)]
    else:  # two objects side by side
        r = rng.uniform(0.13, 0.18) * size
        cy = rng.uniform(r + 1, size - r - 1)
        centres = [(rng.uniform(r + 1, size / 2 - r), cy), (rng.uniform(size / 2 + r, size - r - 1), cy)]
    for cx, cy in centres:
        (pen.ellipse if values[2] else pen.rectangle)([cx - r, cy - r, cx + r, cy + r], fill=colour)
    return img


def write_example(folder: str | Path, n_per_class: int = 8, n_new: int = 6, seed: int = 0,
                  size: int = 32) -> Path:
    """Write the example into ``folder`` (created); return it."""
    folder = Path(folder)
    rng = np.random.default_rng(seed)
    for name, values in CLASSES.items():
        (folder / "images" / name).mkdir(parents=True, exist_ok=True)
        for i in range(n_per_class):
            draw(values, rng, size).save(folder / "images" / name / f"{i:02d}.png")
    (folder / "new_images").mkdir(parents=True, exist_ok=True)
    for i in range(n_new):
        draw(NEW_CLASS[1], rng, size).save(folder / "new_images" / f"{NEW_CLASS[0]}_{i:02d}.png")
    rows = ["class," + ",".join(CONCEPTS)] + [f"{n}," + ",".join(map(str, v)) for n, v in CLASSES.items()]
    (folder / "concepts.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return folder


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", help="output folder, e.g. datasets/custom/example")
    args = parser.parse_args()
    print(f"wrote {write_example(args.folder)}")
