"""Interventions on a run directory: a head with its calibration, groups and expert values.

:func:`open_head` prepares one head of a run for interventions (:class:`RunHead`): the detector's
concept probabilities go through the run's calibration when the head reads calibrated concepts,
then an expert's answers replace some of them and the head is re-run (probabilities, credal set,
ignorance, OOD score), or explained with the intervention recorded. Two kinds of head:

``sequential``
    The run's own head (``head/<name>/<inputs>``, written by ``fit-head``), fitted on the
    detector's concept probabilities; a run without saved heads (an open-world fold) gets the
    same head fitted here on its train split (FERL heads with fit-head's default concept settings,
    `cbm.heads.models.CONCEPT_SETTINGS`; CART heads on `cbm.heads.interventions.training_rows`).
``independent``
    The same head fitted on the train split's **true** concept labels (Koh et al. 2020's
    independent bottleneck), the head an expert's answers suit: it reads 0 / 1 concepts in
    training, and the detector's calibrated probabilities at test time.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cbm.concepts.calibration import ConceptCalibrator
from cbm.concepts.interventions import ConceptGroups, ExpertValues, Intervention, intervene
from cbm.data.concept_tables import ConceptTable, load_concept_table
from cbm.heads import ConceptHead, load_head, make_head
from cbm.heads.interventions import (
    HeadOutputs,
    InterventionExplanation,
    expert_values_for,
    explain,
    head_outputs,
    training_rows,
)
from ferl.io.persist import POINTER

__all__ = ["FITS", "RunConcepts", "RunHead", "load_concepts", "open_head"]

log = logging.getLogger(__name__)

#: How the head was fitted: on the detector's concepts (fit-head's heads) or on the true concepts.
FITS = ("sequential", "independent")


@dataclass
class RunConcepts:
    """A run's concept tables and calibration (see :func:`load_concepts`).

    Attributes
    ----------
    run_dir : Path
    tables : dict of str to ConceptTable
        Every ``concepts/<split>.npz``.
    calibrator : ConceptCalibrator
        ``calibration.json``, or one fitted on val when the run has none.
    groups : ConceptGroups
        From the train table, one-hot flags from the train labels.
    """

    run_dir: Path
    tables: dict
    calibrator: ConceptCalibrator
    groups: ConceptGroups

    @property
    def class_names(self) -> np.ndarray:
        return np.asarray(self.tables["train"].class_names)

    def concepts(self, split: str, inputs: str = "calibrated") -> np.ndarray:
        """Detector probabilities of a split (``raw``) or their calibrated values, float64 (n, k)."""
        if split not in self.tables:
            raise ValueError(f"split {split!r} not in {self.run_dir / 'concepts'}; found {list(self.tables)}")
        table: ConceptTable = self.tables[split]
        if inputs == "raw":
            return table.probs.astype(np.float64)
        return self.calibrator.transform(table.probs, table.concept_names)


def load_concepts(run_dir: str | os.PathLike) -> RunConcepts:
    """Read a run's (or an open-world fold's) concept tables and calibration.

    Raises
    ------
    FileNotFoundError
        No ``concepts/train.npz``, or neither ``calibration.json`` nor a val table.
    ValueError
        Invalid tables or calibration file.
    """
    run_dir = Path(run_dir)
    folder = run_dir / "concepts"
    if not (folder / "train.npz").is_file():
        raise FileNotFoundError(f"{folder / 'train.npz'} not found: {run_dir} is not a run directory made by "
                                "train-detector (or an open-world fold)")
    tables = {p.stem: load_concept_table(p) for p in sorted(folder.glob("*.npz")) if p.is_file()}
    if (run_dir / "calibration.json").is_file():
        calibrator = ConceptCalibrator.load(run_dir / "calibration.json")
    elif "val" in tables:
        log.info("%s has no calibration.json: fitting the calibration on val", run_dir)
        val = tables["val"]
        calibrator = ConceptCalibrator().fit(val.probs, val.concept_labels, val.concept_names)
    else:
        raise FileNotFoundError(f"{run_dir} has neither calibration.json nor concepts/val.npz")
    train = tables["train"]
    groups = ConceptGroups.from_concepts(train.concept_names, train.concept_groups, train.concept_labels)
    return RunConcepts(run_dir, tables, calibrator, groups)


@dataclass
class RunHead:
    """One head of a run, ready for interventions (see :func:`open_head`).

    Attributes
    ----------
    run : RunConcepts
    head : ConceptHead
    fit : {"sequential", "independent"}
    inputs : {"raw", "calibrated"}
        What the head reads at test time.
    groups : ConceptGroups
    expert : ExpertValues
        How an answer enters the head.
    """

    run: RunConcepts
    head: ConceptHead
    fit: str
    inputs: str
    groups: ConceptGroups
    expert: ExpertValues

    @property
    def label(self) -> str:
        """``<head> (<fit>)``, e.g. ``ferl-deep (independent)``."""
        return f"{self.head.name} ({self.fit})"

    def concepts(self, split: str) -> np.ndarray:
        """What the head reads for a split: detector probabilities, calibrated when ``inputs`` is."""
        return self.run.concepts(split, self.inputs)

    def intervene(self, split: str, values: Mapping[str, object],
                  rows=None) -> tuple[Intervention, HeadOutputs]:
        """Set concepts of ``rows`` of ``split`` by concept or group name and re-run the head.

        See :func:`cbm.concepts.interventions.intervene` for ``values``; returns the intervention
        and the head's outputs on the whole split after it.
        """
        done = intervene(self.concepts(split), self.groups, values, self.expert, rows)
        return done, head_outputs(self.head, done.X, feature_score=self.run.tables[split].feature_score)

    def explain(self, split: str, row: int, values: Mapping[str, object],
                top_k: int | None = 5) -> InterventionExplanation:
        """FERL's explanation of one row before and after setting ``values`` (recorded in it)."""
        X = self.concepts(split)
        if not 0 <= row < len(X):
            raise ValueError(f"row {row} out of range: split {split!r} has {len(X)} rows")
        features = self.run.tables[split].feature_score
        return explain(self.head, X[row], self.groups, values, self.expert, top_k,
                       None if features is None else float(features[row]))


def open_head(run: RunConcepts, name: str = "ferl-deep", fit: str = "sequential", inputs: str = "calibrated",
              expert: str = "auto", seed: int = 0) -> RunHead:
    """Prepare head ``name`` of a run for interventions.

    Parameters
    ----------
    run : RunConcepts
        :func:`load_concepts`.
    name : str
        Registry head name.
    fit : {"sequential", "independent"}
        See the module docstring.
    inputs : {"raw", "calibrated"}
        Concepts the head reads (an independent head is fitted on labels and reads these).
    expert : {"auto", "labels", "percentiles"}
        How answers enter the head (:func:`cbm.heads.interventions.expert_values_for`; the
        percentiles are those of the head's training inputs).
    seed : int
        Seed of a head fitted here.

    Raises
    ------
    ValueError
        Unknown fit, inputs, head or expert mode; ``lr-restricted`` or ``cart-compact`` without a saved head.
    FileNotFoundError
        A saved head that cannot be read.
    """
    if fit not in FITS:
        raise ValueError(f"unknown fit {fit!r}; choose from {list(FITS)}")
    if inputs not in ("raw", "calibrated"):
        raise ValueError(f"inputs must be 'raw' or 'calibrated', got {inputs!r}")
    train = run.tables["train"]
    names = run.class_names
    saved = run.run_dir / "head" / name / inputs
    # a head saved by fit-head: versioned (`current.json`, ferl.io.persist) or older, files side by side
    if fit == "sequential" and any((saved / f).is_file() for f in (POINTER, "head.json")):
        head, X_fit = load_head(saved), run.concepts("train", inputs)
    else:
        if name in ("lr-restricted", "cart-compact"):
            raise ValueError(f"{name} takes its size from a fit-head run; evaluate it on a "
                             "run whose heads were saved by fit-head (sequential)")
        X_fit = (train.concept_labels.astype(np.float64) if fit == "independent"
                 else run.concepts("train", inputs))
        # FERL heads with fit-head's (and evaluate-openworld's) default settings, the concept-vector ones
        head = make_head(name, seed=seed, **({"settings": "concepts"} if name.startswith("ferl-") else {}))
        head.fit(*training_rows(head, X_fit, names[train.y], None if fit == "independent" else train, seed),
                 train.concept_names)
    return RunHead(run, head, fit, inputs, run.groups, expert_values_for(head, X_fit, expert))
