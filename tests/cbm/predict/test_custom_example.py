"""The README's tiny custom example tells its story (issue 35): trained as datasets/custom/README.md
says (configs/detector/custom.yaml as shipped, fit-head's default FERL-deep, predict's defaults), the
never-trained ``blue_square`` images are flagged as novel or abstained on, at least 4 of the 6."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pandas as pd

from cbm.detector.cli import train_detector_main
from cbm.heads.fit import fit_head_main
from cbm.predict import predict_main

ROOT = Path(__file__).resolve().parents[3]


def test_the_new_combination_is_flagged_or_abstained_on(tmp_path):
    write = runpy.run_path(str(ROOT / "scripts" / "make_custom_example.py"))["write_example"]
    example, run = write(tmp_path / "ex"), tmp_path / "run"
    train_detector_main(["--config", str(ROOT / "configs" / "detector" / "custom.yaml"),
                         "--run-dir", str(run), "--data.dataset_kwargs", json.dumps({"root": str(example)}),
                         "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"])
    # FERL-deep alone: the same head as with the default head list (no other head feeds it)
    fit_head_main(["--config", str(ROOT / "configs" / "head" / "default.yaml"), "--run", str(run),
                   "--heads", "ferl-deep"])
    predict_main(["--run", str(run), "--folder", str(example / "new_images"), "--out", str(tmp_path / "out"),
                  "--page", "false"])
    table = pd.read_csv(tmp_path / "out" / "predictions.csv")
    assert len(table) == 6 and table["input"].str.startswith("blue_square_").all()
    caught = table["ood_flag"] | table["abstained"]
    assert caught.sum() >= 4, table[["input", "class", "set", "abstained", "ood_score", "ood_flag"]]
