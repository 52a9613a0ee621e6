"""The held-out rows a FERL head's operating point is calibrated on, beside the clean val rows.

``fit-head`` and ``evaluate-openworld`` read the val and test rows' feature scores (the detector's
feature typicality, `cbm.detector.typicality`) and the shift-calibration table
``concepts/val_shift.npz`` (the val images under ImageNet-C's validation corruptions, written by
``train-detector``) into a `Shift`, which `cbm.heads.operating.fit_operating_point` reads.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cbm.concepts.calibration import crossfit_calibrate
from cbm.data.concept_tables import SHIFT_SPLIT, check_concept_names, load_concept_table

__all__ = ["Shift", "shift_inputs"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Shift:
    """What the operating point reads beside the clean val rows: the rows' feature scores (val,
    test; None for tables without them) and the shift-calibration rows (``concepts/val_shift.npz``)
    by input kind, with their classes and feature scores (None: no such table)."""

    feature_val: np.ndarray | None = None
    feature_test: np.ndarray | None = None
    X: dict | None = None
    y: np.ndarray | None = None
    feature: np.ndarray | None = None

    def rows(self, kind: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        return None if self.X is None else (self.X[kind], self.y, self.feature)


def shift_inputs(concepts, tables, class_names, seen, seed, concept_names) -> Shift:
    """The `Shift` of a run's tables: the shift-calibration table calibrated with the val maps of
    its images' folds (as the val rows are, out of sample); none when the run has no such table or
    its tables carry no feature scores (a detector exported before them, or concept vectors made
    elsewhere), and then the sets do not widen (logged).

    Parameters
    ----------
    concepts : path-like
        The run directory or its ``concepts/`` folder.
    tables : dict of str to ConceptTable
        The run's train, val and test tables.
    class_names : ndarray of str
    seen : ndarray of shape (n_test,), bool
        The test rows of classes seen in train (those the metrics read).
    seed : int
        Of the val rows' cross-fitted calibration (`cbm.concepts.calibration.crossfit_calibrate`).
    concept_names : list of str

    Raises
    ------
    ValueError
        A shift table of other concepts, or rows of images outside the val table.
    """
    val, test = tables["val"], tables["test"]
    folder = Path(concepts) / "concepts" if (Path(concepts) / "concepts").is_dir() else Path(concepts)
    path = folder / f"{SHIFT_SPLIT}.npz"
    if val.feature_score is None or test.feature_score is None or not path.is_file():
        log.info("no %s or no feature scores in the concept tables: the credal sets keep their clean "
                 "threshold under shift (train-detector writes both)", path)
        return Shift(val.feature_score, None if test.feature_score is None else test.feature_score[seen])
    table = load_concept_table(path)
    check_concept_names(table.concept_names, val.concept_names, source=str(path),
                        reference="concepts/val.npz")
    where = {s: i for i, s in enumerate(val.sample_ids.tolist())}
    if table.shift is None or any(s not in where for s in table.shift["source_ids"].tolist()):
        raise ValueError(f"{path} holds rows of images that are not in concepts/val.npz; export the run "
                         "again (train-detector)")
    rows = np.array([where[s] for s in table.shift["source_ids"].tolist()], dtype=np.int64)
    _, calibrated = crossfit_calibrate(val.probs, val.concept_labels, concept_names, seed=seed,
                                       extra=(table.probs, rows))
    return Shift(val.feature_score, test.feature_score[seen], {"raw": table.probs, "calibrated": calibrated},
                 class_names[table.y], table.feature_score)
