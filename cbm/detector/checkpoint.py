"""Concept names stored in concept-detector checkpoints, checked against concept tables."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from cbm.data.concept_tables import ConceptTable, check_concept_names

__all__ = ["check_table_matches_checkpoint", "checkpoint_concept_names"]


def checkpoint_concept_names(ckpt_path: str | os.PathLike) -> list[str]:
    """Concept names stored in a :class:`~cbm.detector.ConceptDetector` checkpoint.

    Raises
    ------
    FileNotFoundError
        When the checkpoint does not exist.
    ValueError
        When it holds no ``concept_names`` hyper-parameter.
    """
    if not Path(ckpt_path).is_file():
        raise FileNotFoundError(f"checkpoint {ckpt_path} does not exist")
    ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=True, mmap=True)
    names = ckpt.get("hyper_parameters", {}).get("concept_names")
    if names is None:
        raise ValueError(f"{ckpt_path} is not a concept-detector checkpoint (no concept_names)")
    return [str(n) for n in names]


def check_table_matches_checkpoint(table: ConceptTable, ckpt_path: str | os.PathLike) -> None:
    """Raise ValueError, listing the difference, unless the table's concepts are the checkpoint's."""
    check_concept_names(table.concept_names, checkpoint_concept_names(ckpt_path),
                        source=f"concept table {table.split!r}", reference=f"checkpoint {ckpt_path}")
