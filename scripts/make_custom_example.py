"""Write the tiny bring-your-own-data example of ``datasets/custom/README.md``.

Three classes of coloured shapes (``red_circle``, ``blue_circle``, ``red_square``) with 8 images
each in ``images/<class>/``, a per-class ``concepts.csv`` with two concept groups (``colour::red``,
``colour::blue``, ``shape::circle``, ``shape::square``), and 6 images of a class never trained on
(``blue_square``: a new combination of known concepts) in ``new_images/`` for ``predict``: 30 PNG
files of 32 x 32 pixels, drawn with PIL from a seed.

Examples
--------
    python scripts/make_custom_example.py datasets/custom/example
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

CONCEPTS = ["colour::red", "colour::blue", "shape::circle", "shape::square"]
CLASSES = {"red_circle": (1, 0, 1, 0), "blue_circle": (0, 1, 1, 0), "red_square": (1, 0, 0, 1)}
NEW_CLASS = ("blue_square", (0, 1, 0, 1))


def draw(values: tuple[int, ...], rng: np.random.Generator, size: int = 32) -> Image.Image:
    """One image: a red or blue circle or square, jittered in position, size and shade, on noise."""
    background = rng.integers(150, 230, size=(size, size, 3), dtype=np.uint8)
    img = Image.fromarray(background)
    shade = int(rng.integers(150, 256))
    colour = (shade, 30, 30) if values[0] else (30, 30, shade)
    r = rng.uniform(0.22, 0.34) * size
    cx, cy = rng.uniform(r + 1, size - r - 1, size=2)
    box = [cx - r, cy - r, cx + r, cy + r]
    pen = ImageDraw.Draw(img)
    (pen.ellipse if values[2] else pen.rectangle)(box, fill=colour)
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
