"""train-detector with DDP on the CPU (so that the multi-device path has a test): two gloo ranks
train one epoch, rank 0 alone writes the run, and its concept tables have a single-rank export's
shapes and names.

About 17 s of CPU (two interpreters importing torch and Lightning make most of it): 32 s wall on
2 cores shared with other jobs (load 5.5), the single-rank run in this process 1.3 s of it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cbm.data.concept_tables import load_concept_tables
from cbm.detector.cli import train_detector_main

REPO = Path(__file__).resolve().parents[3]
SPLITS = ("train", "val", "test", "novel")
#: 24 training images of 32 px, timm's 0.4 M-parameter test ResNet, one epoch.
ARGS = ["--config", str(REPO / "configs" / "detector" / "synthetic.yaml"),
        "--data.dataset_kwargs", '{"n_per_class": 5, "n_classes": 8, "n_heldout": 2}',
        "--data.image_size", "32", "--data.batch_size", "8", "--trainer.max_epochs", "1",
        "--model.backbone", "test_resnet", "--trainer.accelerator", "cpu", "--threads", "1",
        "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]

#: Runs train-detector with an audit hook that records, per process, every file it creates,
#: writes, renames or deletes under the run folder. Lightning starts rank 1 by running this same
#: script again (LOCAL_RANK=1), so both ranks are audited.
DRIVER = '''
import os, sys
run, log = os.path.realpath(os.environ["AUDIT_RUN"]), open(os.environ["AUDIT_LOG"] + f".{os.getpid()}", "w")
WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
EVENTS = {"os.rename": 1, "os.remove": 0, "os.rmdir": 0, "os.truncate": 0, "shutil.rmtree": 0}

def hook(event, args):
    if event == "open":
        path, mode, flags = args
        if not (any(c in mode for c in "wax+") if isinstance(mode, str) else flags & WRITE):
            return
    elif event == "os.mkdir":
        path = args[0]
        if os.path.exists(path):
            return
    elif event in EVENTS:
        path = args[EVENTS[event]]
    else:
        return
    if isinstance(path, (str, os.PathLike)) and os.path.realpath(path).startswith(run + os.sep):
        log.write(f"{event} {os.path.relpath(os.path.realpath(path), run)}\\n")
        log.flush()

sys.addaudithook(hook)
from cbm.detector.cli import train_detector_main
train_detector_main(sys.argv[1:])
'''


@pytest.mark.skipif(not hasattr(sys, "addaudithook"), reason="needs audit hooks")
def test_ddp_on_two_cpu_ranks_exports_what_one_rank_exports_and_only_rank_0_writes(tmp_path):
    ddp, single = tmp_path / "ddp", tmp_path / "single"
    (tmp_path / "driver.py").write_text(DRIVER)
    env = {**os.environ, "AUDIT_RUN": str(ddp), "AUDIT_LOG": str(tmp_path / "audit"),
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "MASTER_ADDR": "127.0.0.1"}
    rank0 = subprocess.Popen([sys.executable, str(tmp_path / "driver.py"), *ARGS, "--run-dir", str(ddp),
                              "--trainer.strategy", "ddp", "--trainer.devices", "2"],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = rank0.communicate(timeout=300)
    finally:
        rank0.kill()
    assert rank0.returncode == 0, err[-3000:]
    logs = {int(p.suffix[1:]): p.read_text().splitlines() for p in tmp_path.glob("audit.*")}
    assert len(logs) == 2 and rank0.pid in logs  # rank 0 and the rank 1 it started
    assert out.count("concept accuracy") == len(SPLITS) + 1  # one report, by rank 0 (and val_shift's line)
    writers = {pid: lines[:5] for pid, lines in logs.items() if lines}
    assert list(writers) == [rank0.pid], writers  # rank 1 created, wrote, renamed and deleted nothing
    written = "\n".join(logs[rank0.pid])
    assert "detector/checkpoints/best.ckpt" in written and "concepts/test.npz" in written

    train_detector_main([*ARGS, "--run-dir", str(single)])
    a, b = (load_concept_tables(run, splits=SPLITS) for run in (ddp, single))
    for split in SPLITS:
        assert a[split].probs.shape == b[split].probs.shape and a[split].probs.dtype == b[split].probs.dtype
        assert list(a[split].concept_names) == list(b[split].concept_names)
        assert list(a[split].class_names) == list(b[split].class_names)
        assert list(a[split].sample_ids) == list(b[split].sample_ids)  # every row once, in table order
