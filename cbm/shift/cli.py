"""The ``evaluate-shift`` command line (settings in YAML like the other console scripts)::

    evaluate-shift --run runs/cub50_lite0 --config configs/shift/cub50_lite0.yaml --out runs/shift/cub50_lite0
    evaluate-shift --run runs/demo --config configs/shift/synthetic.yaml --out runs/demo/shift

Bad input ends the program with ``evaluate-shift: error: <message>`` (exit status 1); SIGTERM / SIGINT
with one line saying what was kept (exit status 143 / 130, :func:`cbm.jobs.console_main`): the
finished cells of corrupted images stay cached and the next run reuses them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from jsonargparse import ActionConfigFile, ArgumentParser

from cbm.data.corruptions import CORRUPTIONS
from cbm.detector.train import quiet_library_noise
from cbm.jobs import console_main, phase
from cbm.runtime import add_threads_argument, set_threads
from cbm.shift.protocol import evaluate_shift
from cbm.shift.settings import ShiftSettings

__all__ = ["evaluate_shift_main", "shift_parser"]

_DEFAULTS = ShiftSettings()


def shift_parser() -> ArgumentParser:
    """The ``evaluate-shift`` argument parser (every option can be set in ``--config``)."""
    p = ArgumentParser(prog="evaluate-shift", description=(
        "Corrupt a run's test images with ImageNet-C corruptions (severities 1-5), pass them through the "
        "run's detector, calibration and heads, and compare the product's sets with a logistic "
        "regression's split-conformal, APS and RAPS sets and the shift detectors."))
    p.add_argument("--config", action=ActionConfigFile, help="YAML config (configs/shift/*.yaml)")
    add_threads_argument(p)
    p.add_argument("--run", type=str, required=True, help="run directory (train-detector + fit-head)")
    p.add_argument("--out", type=str, required=True, help="output folder (shift.csv, shift.json, shift.md)")
    p.add_argument("--data-root", type=str | None, default=None,
                   help="folder holding the run's data set (default: the run's config, then $FERL_DATA_ROOT)")
    p.add_argument("--corruptions", type=list[str], default=list(_DEFAULTS.corruptions),
                   help=f"evaluated corruptions, of {list(CORRUPTIONS)}")
    p.add_argument("--severities", type=list[int], default=list(_DEFAULTS.severities), help="of 1-5")
    p.add_argument("--max-rows", type=int | None, default=_DEFAULTS.max_rows,
                   help="test images corrupted (a seeded subset; null: all)")
    p.add_argument("--seed", type=int, default=_DEFAULTS.seed, help="of the subset and the corruptions")
    p.add_argument("--product", type=str, default=_DEFAULTS.product, help="the head predict uses")
    p.add_argument("--presets", type=list[str], default=list(_DEFAULTS.presets), help="other FERL heads")
    p.add_argument("--inputs", type=str, default=_DEFAULTS.inputs, help="calibrated | raw")
    p.add_argument("--batch-size", type=int, default=_DEFAULTS.batch_size, help="images per forward pass")
    p.add_argument("--num-workers", type=int, default=_DEFAULTS.num_workers,
                   help="loader processes that corrupt the images")
    p.add_argument("--accelerator", type=str, default="auto", help="auto (a GPU when present) or cpu")
    return p


def evaluate_shift_main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``evaluate-shift``; prints ``shift.md``."""
    cfg = shift_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    quiet_library_noise()

    def job():
        set_threads(cfg.threads)
        settings = ShiftSettings(corruptions=tuple(cfg.corruptions), severities=tuple(cfg.severities),
                                 max_rows=cfg.max_rows, seed=cfg.seed, product=cfg.product,
                                 presets=tuple(cfg.presets), inputs=cfg.inputs, batch_size=cfg.batch_size,
                                 num_workers=cfg.num_workers)
        with phase("evaluating the run under shift", f"the finished cells are cached in {cfg.out}/cache; "
                   "rerun to reuse them"):
            return evaluate_shift(cfg.run, settings, cfg.out, cfg.data_root, cfg.accelerator)

    console_main("evaluate-shift", job)
    print((Path(cfg.out) / "shift.md").read_text())
