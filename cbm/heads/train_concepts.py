"""Which concept vectors the heads are fitted on: in-sample, cross-fitted or true concepts.

* ``in-sample``: the detector's probabilities on its own training images, Koh et al.'s
  "sequential" bottleneck and the FERL paper's protocol (``concepts/train.npz``).
* ``cross-fitted``: out-of-fold probabilities, each training image predicted by a detector that
  did not see it (``concepts/train_crossfit.npz``, written by ``train-detector`` with
  ``crossfit_folds``; :mod:`cbm.detector.crossfit`). Beyond the paper: in-sample probabilities
  are far cleaner than test ones (a linear probe reaches train AUROC ≈ 1), so heads fitted on
  them trust concepts more than test inputs deserve.
* ``independent``: the true concept labels, Koh et al.'s "independent" bottleneck.

Test inputs are always the detector's test probabilities (raw or calibrated).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from cbm.concepts.calibration import ConceptCalibrator
from cbm.data.concept_tables import ConceptTable, check_concept_names, load_concept_table
from cbm.detector.crossfit import CROSSFIT_SPLIT

__all__ = ["TRAIN_CONCEPTS", "crossfit_table", "resolve_train_concepts", "train_inputs"]

#: The training-concept sources, in report order.
TRAIN_CONCEPTS = ("cross-fitted", "in-sample", "independent")


def crossfit_table(concepts_dir: str | os.PathLike, train: ConceptTable) -> ConceptTable | None:
    """The cross-fitted train table beside ``train`` (None when the run has none).

    Raises
    ------
    ValueError
        Invalid content, or concepts, classes or sample ids (order included) that differ from
        ``train``'s.
    """
    folder = Path(concepts_dir)
    if folder.name != "concepts" and (folder / "concepts").is_dir():
        folder = folder / "concepts"
    path = folder / f"{CROSSFIT_SPLIT}.npz"
    if not path.is_file():
        return None
    table = load_concept_table(path)
    check_concept_names(table.concept_names, train.concept_names, source=f"concepts/{path.name}",
                        reference="concepts/train.npz")
    if table.class_names != train.class_names or not np.array_equal(table.sample_ids, train.sample_ids):
        raise ValueError(f"{path} does not hold the rows of concepts/train.npz (other classes or sample "
                         "ids): rerun train-detector with crossfit_folds")
    return table


def resolve_train_concepts(choice: str, has_crossfit: bool) -> str:
    """The training-concept source of the headline heads.

    ``"auto"`` -> ``"cross-fitted"`` when the run has cross-fitted train concepts, else
    ``"in-sample"``. The rationale: cross-fitted vectors are as noisy as test ones (their mean
    concept AUROC matches test's, where the in-sample ones are nearly perfect), so a head fitted on
    them sees the inputs it will be given. On the val split (never test; ``python
    scripts/compare_train_concepts.py runs/cub50_lite0 runs/openworld/cub50_lite0/seed0/fold*``, CUB-50)
    in-sample concepts did a little better on average for FERL-medium and CART, cross-fitted ones
    for FERL-deep, each within the spread over runs (measured with the weighted-Gini learner that
    grows chains on these concepts, `ferl.presets`). Figures in docs/results/concept-heads.md. The other
    sources are always reported beside.

    Raises
    ------
    ValueError
        An unknown choice, or ``"cross-fitted"`` without a cross-fitted table (the message says how
        to make one).
    """
    if choice == "auto":
        return "cross-fitted" if has_crossfit else "in-sample"
    if choice not in TRAIN_CONCEPTS:
        raise ValueError(f"train_concepts must be auto or one of {list(TRAIN_CONCEPTS)}, got {choice!r}")
    if choice == "cross-fitted" and not has_crossfit:
        raise ValueError(f"train_concepts 'cross-fitted' needs concepts/{CROSSFIT_SPLIT}.npz: train the "
                         "detector with --crossfit_folds 5 (cheap with model.freeze_backbone: true)")
    return choice


def train_inputs(source: str, train: ConceptTable, crossfit: ConceptTable | None,
                 calibrator: ConceptCalibrator) -> dict[str, np.ndarray]:
    """The heads' training vectors of ``source`` for both input kinds.

    Returns
    -------
    dict
        ``raw`` and ``calibrated``: float64 ndarrays of shape (n_train, k) in [0, 1]. For
        ``independent`` both are the true 0/1 labels (certain concepts need no calibration).
    """
    if source == "independent":
        labels = train.concept_labels.astype(np.float64)
        return {"raw": labels, "calibrated": labels}
    table = crossfit if source == "cross-fitted" else train
    if table is None:
        raise ValueError(f"no {source} train concepts")
    probs = table.probs.astype(np.float64)
    return {"raw": probs, "calibrated": calibrator.transform(probs, table.concept_names)}
