"""What concept-detector checkpoints record besides the weights: concept names (checked against
concept tables) and the data module's settings (the transform ``predict`` rebuilds)."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from cbm.data.concept_tables import ConceptTable, check_concept_names

__all__ = ["check_table_matches_checkpoint", "checkpoint_concept_names", "checkpoint_data_settings"]


def _read(ckpt_path: str | os.PathLike) -> dict:
    """The checkpoint's top-level dict, memory-mapped; ValueError for a damaged file."""
    if not Path(ckpt_path).is_file():
        raise FileNotFoundError(f"checkpoint {ckpt_path} does not exist")
    try:
        ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as err:  # torch raises RuntimeError, EOFError, UnpicklingError... for bad files
        raise ValueError(f"checkpoint {ckpt_path} cannot be read, it is truncated or damaged ({err}); "
                         "resume from another checkpoint (--ckpt-path best or a file), or delete it to "
                         "train afresh") from err
    if not isinstance(ckpt, dict):
        raise ValueError(f"{ckpt_path} is not a concept-detector checkpoint (no concept_names)")
    return ckpt


def checkpoint_data_settings(ckpt_path: str | os.PathLike) -> dict | None:
    """The data module's settings a detector was trained with (image size, evaluation crop ...), as
    Lightning stored them in its checkpoint (``datamodule_hyper_parameters``); None for a checkpoint
    without them. ``predict`` builds its transform from these, not from the editable config.yaml.

    Raises
    ------
    FileNotFoundError, ValueError
        As :func:`checkpoint_concept_names`.
    """
    settings = _read(ckpt_path).get("datamodule_hyper_parameters")
    return dict(settings) if isinstance(settings, dict) else None


def checkpoint_concept_names(ckpt_path: str | os.PathLike) -> list[str]:
    """Concept names stored in a :class:`~cbm.detector.ConceptDetector` checkpoint.

    Raises
    ------
    FileNotFoundError
        When the checkpoint does not exist.
    ValueError
        When it cannot be read (truncated or damaged) or holds no ``concept_names`` hyper-parameter.
    """
    ckpt = _read(ckpt_path)
    names = (ckpt.get("hyper_parameters") or {}).get("concept_names")
    if names is None:
        raise ValueError(f"{ckpt_path} is not a concept-detector checkpoint (no concept_names)")
    return [str(n) for n in names]


def check_table_matches_checkpoint(table: ConceptTable, ckpt_path: str | os.PathLike) -> None:
    """Raise ValueError, listing the difference, unless the table's concepts are the checkpoint's."""
    check_concept_names(table.concept_names, checkpoint_concept_names(ckpt_path),
                        source=f"concept table {table.split!r}", reference=f"checkpoint {ckpt_path}")
