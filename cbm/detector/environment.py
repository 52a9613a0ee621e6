"""What a detector run records about its session: versions, seed, git commit, device, threads.

Written by `train_detector` as ``<run>/environment.json`` so that a run can be reproduced.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import Trainer

from cbm.runtime import thread_settings

__all__ = ["environment_info"]


def _git_commit() -> dict[str, Any]:
    repo = Path(__file__).resolve().parents[1]
    out: dict[str, Any] = {"commit": None, "dirty": None}
    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10, check=False)
        if head.returncode == 0:
            out["commit"] = head.stdout.strip()
            status = subprocess.run(["git", "-C", str(repo), "status", "--porcelain"],
                                    capture_output=True, text=True, timeout=10, check=False)
            out["dirty"] = bool(status.stdout.strip()) if status.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        pass
    return out


def environment_info(trainer: Trainer, seed: int) -> dict[str, Any]:
    """Versions, seed, git commit, device and CPU threads of this session (JSON-able)."""
    packages = {}
    for dist in ("ferl-cbm", "torch", "torchvision", "lightning", "timm", "torchmetrics", "numpy",
                 "scikit-learn", "jsonargparse", "wandb"):
        try:
            packages[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            packages[dist] = None
    return {
        "time": datetime.now(UTC).isoformat(timespec="seconds"), "command": sys.argv,
        "python": sys.version.split()[0], "platform": platform.platform(),
        "packages": packages, "seed": seed,
        "git": _git_commit(),
        "device": {
            "accelerator": type(trainer.accelerator).__name__,
            "strategy": type(trainer.strategy).__name__,
            "num_devices": trainer.num_devices,
            "num_nodes": trainer.num_nodes,
            "precision": str(trainer.precision),
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "cuda_version": torch.version.cuda,
            "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
        },
        "threads": thread_settings(),
    }
