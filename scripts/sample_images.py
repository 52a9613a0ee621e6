"""Write a few of a run's test and held-out images as PNG files, to try ``predict`` on.

The images are drawn from the run's data set (rebuilt from its ``config.yaml``; the synthetic world
is regenerated from its seed): ``n - novel`` test images of trained classes and ``novel`` images
of the held-out classes (split ``novel``), chosen at random with ``seed``. File names are
``<split>_<class>_<i>.png`` (the split once: held-out classes are named ``novel_..`` already), so the
table ``predict`` writes can be checked by eye. The output folder must hold no image yet:
``predict --folder`` reads every image under it.

Examples
--------
    python scripts/sample_images.py runs/demo /tmp/demo_images        # 10 test + 10 held-out
    predict --run runs/demo --folder /tmp/demo_images --out /tmp/demo_predictions
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from PIL import Image

from cbm.predict.inputs import find_images
from cbm.report.run import load_run


def file_name(split: str, class_name: str, i: int) -> str:
    """``<split>_<class>_<i>.png``, the split written once (``novel_00_03.png``, not
    ``novel_novel_00_03.png``)."""
    stem = class_name if class_name.startswith(f"{split}_") else f"{split}_{class_name}"
    return f"{stem}_{i:02d}.png"


def sample_images(run_dir: str | Path, out: str | Path, n: int = 20, novel: int = 10,
                  seed: int = 0) -> list[Path]:
    """Write the images; return their paths.

    Raises
    ------
    ValueError
        The run's data set cannot be rebuilt here or has no images, ``novel`` exceeds ``n``, or
        ``out`` holds images already (``predict --folder`` would read them too).
    """
    if not 0 <= novel <= n:
        raise ValueError(f"novel must be in [0, n], got novel={novel}, n={n}")
    out = Path(out)
    try:
        present = find_images(out)  # what predict --folder would read
    except FileNotFoundError:  # no folder, or no image in it
        present = []
    if present:
        raise ValueError(f"{out} holds {len(present)} image(s) already (e.g. {present[0].name}); "
                         "predict --folder would read them too: give an empty or new folder")
    table = load_run(run_dir).data
    if table is None or table.kind != "image":
        raise ValueError(f"the data set of {run_dir} is not an image data set available here")
    rng = np.random.default_rng(seed)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for split, count in (("test", n - novel), ("novel", novel)):
        rows = table.indices(split)
        for i, row in enumerate(rng.choice(rows, size=min(count, rows.size), replace=False)):
            image = table.load(int(row))
            image = image if isinstance(image, Image.Image) else Image.fromarray(np.asarray(image))
            path = out / file_name(split, table.class_names[table.y[row]], i)
            image.save(path)
            written.append(path)
    return written


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", help="run directory (train-detector + fit-head)")
    parser.add_argument("out", help="output folder")
    parser.add_argument("--n", type=int, default=20, help="images in all (default 20)")
    parser.add_argument("--novel", type=int, default=10, help="of which held-out-class images (default 10)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the choice")
    args = parser.parse_args()
    try:
        paths = sample_images(args.run_dir, args.out, args.n, args.novel, args.seed)
    except ValueError as err:
        raise SystemExit(f"error: {err}") from None
    print(f"wrote {len(paths)} images to {args.out}")
