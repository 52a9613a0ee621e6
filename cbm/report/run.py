"""Read a finished run directory back for inspection: tables, calibration, heads, images.

Used by the run report (:mod:`cbm.report`), its examples (:mod:`cbm.report.examples`) and the
rule-inspection notebook (``notebooks/inspect_rules.ipynb``). A run directory is what
``train-detector`` + ``fit-head`` write (``docs/DESIGN.md``)::

    config.yaml  concepts/{train,val,test[,novel]}.npz  calibration.json
    head/<name>/{raw,calibrated}/  metrics.json  detector/metrics.json
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import yaml

from cbm.concepts.calibration import ConceptCalibrator
from cbm.data import ConceptDataModule
from cbm.data.concept_tables import ConceptTable, load_concept_table
from cbm.data.tables import SampleTable
from cbm.heads import ConceptHead, load_head
from cbm.openworld.metrics import anomaly_ground_truth

__all__ = ["SPLIT_ORDER", "RunView", "load_run"]

log = logging.getLogger(__name__)

#: Splits a run may hold, in display order.
SPLIT_ORDER = ("train", "val", "test", "novel")


def _read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON ({err}); fix or remove it") from err


@dataclass
class RunView:
    """A run directory opened for reading (see :func:`load_run`).

    Attributes
    ----------
    run_dir : Path
    config : dict
        ``config.yaml`` ({} when absent).
    tables : dict of str to ConceptTable
        Every concept table found (``train``, ``val``, ``test`` and ``novel`` when exported).
    calibrator : ConceptCalibrator or None
        ``calibration.json`` (None before ``fit-head``).
    metrics : dict
        ``metrics.json`` (the ``fit_head`` entry among others; {} when absent).
    detector_metrics : dict
        ``detector/metrics.json`` ({} when absent).
    """

    run_dir: Path
    config: dict
    tables: dict[str, ConceptTable]
    calibrator: ConceptCalibrator | None
    metrics: dict
    detector_metrics: dict

    @property
    def concept_names(self) -> list[str]:
        return next(iter(self.tables.values())).concept_names

    @property
    def class_names(self) -> list[str]:
        return next(iter(self.tables.values())).class_names

    def heads(self) -> list[str]:
        """Names of the saved heads (``head/<name>/``), sorted."""
        folder = self.run_dir / "head"
        return sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []

    def head(self, name: str = "ferl-deep", inputs: str = "calibrated") -> ConceptHead:
        """Load ``head/<name>/<inputs>`` (:func:`cbm.heads.load_head`).

        Raises
        ------
        FileNotFoundError
            No such head in the run (the saved heads are listed).
        """
        path = self.run_dir / "head" / name / inputs
        if not path.is_dir():
            raise FileNotFoundError(f"no head {name!r} ({inputs} inputs) in {self.run_dir}; saved heads: "
                                    f"{self.heads() or 'none (run fit-head first)'}")
        return load_head(path)

    def concepts(self, split: str, inputs: str = "calibrated") -> np.ndarray:
        """Concept vectors of a split, float64 of shape (n, k) in [0, 1]: the detector's
        probabilities (``inputs="raw"``) or their calibrated values.

        Raises
        ------
        ValueError
            Unknown split or inputs, or calibrated inputs without ``calibration.json``.
        """
        if split not in self.tables:
            raise ValueError(f"split {split!r} not in {self.run_dir / 'concepts'}; found {list(self.tables)}")
        table = self.tables[split]
        if inputs == "raw":
            return table.probs.astype(np.float64)
        if inputs != "calibrated":
            raise ValueError(f"inputs must be 'raw' or 'calibrated', got {inputs!r}")
        if self.calibrator is None:
            raise ValueError(f"{self.run_dir} has no calibration.json: run fit-head first")
        return self.calibrator.transform(table.probs, table.concept_names)

    @cached_property
    def data(self) -> SampleTable | None:
        """The run's data set, rebuilt from ``config.yaml`` (for images and class profiles).

        None when the config has no ``data`` section or the data set's folder is not found here
        (a warning says so); the synthetic world is regenerated from its seed. Other errors (a
        broken config, a damaged data set) are raised.
        """
        data = self.config.get("data")
        if not isinstance(data, dict):
            return None
        try:
            table = ConceptDataModule(**data).table
        except FileNotFoundError as err:
            log.warning("images and class profiles unavailable: %s", err)
            return None
        if list(table.concept_names) != self.concept_names or list(table.class_names) != self.class_names:
            raise ValueError(f"the data set rebuilt from {self.run_dir / 'config.yaml'} has other concept or "
                             "class names than the run's concept tables")
        return table

    def image(self, sample_id: str) -> np.ndarray | None:
        """The image of a sample, uint8 of shape (H, W, 3), or None (features / data absent)."""
        table = self.data
        if table is None or table.kind != "image":
            return None
        rows = np.flatnonzero(table.sample_ids == sample_id)
        if rows.size == 0:
            return None
        img = table.load(int(rows[0]))
        return np.asarray(img.convert("RGB") if hasattr(img, "convert") else img, dtype=np.uint8)

    def anomaly_truth(self, class_index: int) -> tuple[list[str], list[str]] | None:
        """For a class absent from train: (nearest training classes, concepts that differ from them).

        Uses the data set's class-level profiles (:func:`cbm.openworld.metrics.anomaly_ground_truth`);
        None for a training class or when the profiles are not available.
        """
        table = self.data
        train_classes = np.unique(self.tables["train"].y)
        if table is None or class_index in train_classes:
            return None
        near, mask = anomaly_ground_truth(table.class_concepts, [class_index], train_classes)[class_index]
        return [self.class_names[c] for c in near], [self.concept_names[j] for j in np.flatnonzero(mask)]


def load_run(run_dir: str | os.PathLike) -> RunView:
    """Open a run directory (see the module docstring).

    Raises
    ------
    FileNotFoundError
        The folder or its ``concepts/`` tables are missing.
    ValueError
        Invalid tables, JSON or YAML files.
    """
    run_dir = Path(run_dir)
    folder = run_dir / "concepts"
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} not found: {run_dir} is not a run directory (train-detector "
                                "writes one)")
    found = {p.stem for p in folder.glob("*.npz") if p.is_file()}
    splits = [s for s in SPLIT_ORDER if s in found] + sorted(found - set(SPLIT_ORDER))
    if "train" not in found:
        raise FileNotFoundError(f"{folder / 'train.npz'} not found")
    tables = {s: load_concept_table(folder / f"{s}.npz") for s in splits}
    config_path = run_dir / "config.yaml"
    config = {}
    if config_path.is_file():
        try:
            config = yaml.safe_load(config_path.read_text()) or {}
        except yaml.YAMLError as err:
            raise ValueError(f"{config_path} is not valid YAML ({err})") from err
    cal_path = run_dir / "calibration.json"
    return RunView(
        run_dir=run_dir, config=config if isinstance(config, dict) else {}, tables=tables,
        calibrator=ConceptCalibrator.load(cal_path) if cal_path.is_file() else None,
        metrics=_read_json(run_dir / "metrics.json"),
        detector_metrics=_read_json(run_dir / "detector" / "metrics.json"),
    )
