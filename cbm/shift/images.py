"""A run opened for ``evaluate-shift`` and its detector's outputs on corrupted test images, cached.

Every (corruption, severity) cell of the test images goes through the run's own detector once: its
concept probabilities and feature typicality are written to ``<out>/cache/<run key>/<cell>.npz``
(atomically, one file per cell), where the run key hashes the detector checkpoint and the feature
typicality, and the cell's name the corruption, severity, seed and rows. A stopped run keeps every
finished cell, and the next run reuses them; another detector, another seed or other rows make new
files, never a stale read.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml
from torch.utils.data import DataLoader

from cbm.concepts.calibration import ConceptCalibrator
from cbm.data import ConceptDataModule
from cbm.data.concept_tables import ConceptTable, load_concept_tables
from cbm.data.corruptions import CorruptedDataset
from cbm.detector import ConceptDetector
from cbm.detector.checkpoint import checkpoint_data_settings
from cbm.detector.export import detector_outputs
from cbm.detector.typicality import FEATURE_TYPICALITY_FILE, FeatureTypicality
from cbm.heads import ConceptHead, load_head
from ferl.io.persist import atomic_write_bytes

__all__ = ["CHECKPOINT", "ShiftRun", "cached_outputs", "open_run", "test_rows"]

log = logging.getLogger(__name__)

#: The detector checkpoint of a run whose concept tables the heads read.
CHECKPOINT = Path("detector") / "checkpoints" / "best.ckpt"


@dataclass
class ShiftRun:
    """A finished run (``train-detector`` + ``fit-head``) opened for ``evaluate-shift``.

    Attributes
    ----------
    run_dir : Path
    tables : dict of str to ConceptTable
        ``train``, ``val`` and ``test``.
    calibrator : ConceptCalibrator
    heads : dict of str to ConceptHead
        The run's saved heads asked for, by name (of the settings' inputs).
    detector : ConceptDetector
    typicality : FeatureTypicality
    data : ConceptDataModule
        Set up; its table holds the images.
    key : str
        16 hex digits over the checkpoint and the feature typicality (the cache folder).
    seed : int
        ``fit-head``'s seed (the val rows' cross-fitted calibration).
    """

    run_dir: Path
    tables: dict[str, ConceptTable]
    calibrator: ConceptCalibrator
    heads: dict[str, ConceptHead]
    detector: ConceptDetector
    typicality: FeatureTypicality
    data: ConceptDataModule
    key: str
    seed: int

    def concepts(self, probs: np.ndarray, inputs: str) -> np.ndarray:
        """Detector probabilities as the heads read them: calibrated, or raw (float64 (n, k))."""
        probs = np.asarray(probs, dtype=np.float64)
        names = self.tables["train"].concept_names
        return self.calibrator.transform(probs, names) if inputs == "calibrated" else probs


def _file_hash(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def open_run(run_dir: str | os.PathLike, heads: list[str], inputs: str,
             data_root: str | None = None) -> ShiftRun:
    """Open a run for ``evaluate-shift``.

    Parameters
    ----------
    run_dir : path-like
    heads : list of str
        Registry names of the heads to read (``lr`` is always read too).
    inputs : {"calibrated", "raw"}
    data_root : str, optional
        Folder holding the data set (else the run's config, then ``$FERL_DATA_ROOT``).

    Raises
    ------
    FileNotFoundError
        A missing checkpoint, feature typicality (a detector exported before it), calibration,
        head or data set; the message says which command writes it.
    ValueError
        A run whose detector or data set does not read images (features runs), or whose rebuilt data
        set disagrees with its concept tables.
    """
    run_dir = Path(run_dir)
    config_path = run_dir / "config.yaml"
    if not config_path.is_file():
        raise FileNotFoundError(f"{config_path} not found: {run_dir} is not a run made by train-detector")
    config = yaml.safe_load(config_path.read_text()) or {}
    ckpt = run_dir / CHECKPOINT
    if not ckpt.is_file():
        raise FileNotFoundError(f"{ckpt} not found: evaluate-shift needs the run's detector (train-detector "
                                "keeps it)")
    detector = ConceptDetector.from_checkpoint(ckpt).eval()
    data_cfg = {**(config.get("data") or {}), **(checkpoint_data_settings(ckpt) or {})}
    if detector.hparams.input_kind != "image" or data_cfg.get("image_size") is None:
        raise ValueError(f"{run_dir} is a run without image paths: its detector reads feature vectors, and "
                         "corruptions apply to images")
    typicality_path = run_dir / FEATURE_TYPICALITY_FILE
    if not typicality_path.is_file():
        raise FileNotFoundError(f"{typicality_path} not found: the detector was exported before its feature "
                                "typicality existed; train it again (train-detector), then fit-head")
    if not (run_dir / "calibration.json").is_file():
        raise FileNotFoundError(f"{run_dir / 'calibration.json'} not found: run fit-head first")
    if data_root is not None:
        data_cfg["data_root"] = data_root
    data = ConceptDataModule(**data_cfg)
    data.setup()
    if data.table.kind != "image":
        raise ValueError(f"{run_dir}'s data set holds {data.table.kind}, not images: nothing to corrupt")
    tables = load_concept_tables(run_dir)
    if list(data.table.sample_ids[data.parts["test"]]) != list(tables["test"].sample_ids):
        raise ValueError(f"the data set rebuilt from {config_path} has other test images than "
                         f"{run_dir / 'concepts' / 'test.npz'}; point --data-root at the data the run used")
    heads_read = {name: load_head(run_dir / "head" / name / inputs) for name in dict.fromkeys([*heads, "lr"])}
    metrics = run_dir / "metrics.json"
    seed = int(((json.loads(metrics.read_text()) if metrics.is_file() else {}).get("fit_head") or {})
               .get("seed", 0))
    key = hashlib.sha256((_file_hash(ckpt) + _file_hash(typicality_path)).encode()).hexdigest()[:16]
    return ShiftRun(run_dir, tables, ConceptCalibrator.load(run_dir / "calibration.json"), heads_read,
                    detector, FeatureTypicality.load(typicality_path), data, key, seed)


def test_rows(run: ShiftRun, max_rows: int | None, seed: int) -> np.ndarray:
    """Positions in the test table of the images to corrupt: all, or ``max_rows`` drawn with ``seed``
    (sorted)."""
    n = run.tables["test"].n_samples
    if max_rows is None or max_rows >= n:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, size=max_rows, replace=False))


def cached_outputs(run: ShiftRun, rows: np.ndarray, corruption: str, severity: int, seed: int,
                   cache_dir: Path, *, batch_size: int = 64, num_workers: int = 2,
                   accelerator: str = "auto") -> tuple[np.ndarray, np.ndarray]:
    """The detector's concept probabilities (n, k) float32 and feature typicality (n,) float64 of the
    test images ``rows`` (positions in the test table) under one corruption, from the cache or
    computed and cached (module docstring)."""
    ids = run.tables["test"].sample_ids[rows]
    tag = hashlib.sha256("\n".join(ids.tolist()).encode()).hexdigest()[:12]
    path = cache_dir / run.key / f"{corruption}-{severity}-seed{seed}-{tag}.npz"
    if path.is_file():
        try:
            with np.load(path, allow_pickle=False) as npz:
                if npz["sample_ids"].astype(str).tolist() == ids.tolist():
                    return npz["probs"], npz["feature_score"]
        except (OSError, ValueError, KeyError):
            log.warning("%s is damaged: computed again", path)
    table = run.data.table
    positions = run.data.parts["test"][rows]
    dataset = CorruptedDataset(table, positions, [corruption] * len(rows), [int(severity)] * len(rows), seed,
                               run.data.image_size, run.data.eval_crop_fraction)
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=num_workers, shuffle=False)
    doing = (f"corrupting the test images ({corruption}, severity {severity}); the finished cells are "
             f"kept in {cache_dir}")
    features, probs = detector_outputs(run.detector, loader, accelerator=accelerator, doing=doing)
    score = run.typicality.score(features)
    buf = io.BytesIO()
    np.savez(buf, probs=probs, feature_score=score, sample_ids=ids)
    atomic_write_bytes(path, buf.getvalue())
    return probs, score
