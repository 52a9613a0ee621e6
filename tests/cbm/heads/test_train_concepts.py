"""fit-head's training concepts: cross-fitted, in-sample (the paper's) and true (independent)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cbm.concepts.calibration import ConceptCalibrator
from cbm.data.concept_tables import load_concept_table, save_concept_table
from cbm.heads import load_head, make_head
from cbm.heads.fit import fit_head
from cbm.heads.train_concepts import resolve_train_concepts, train_inputs

K, CLASSES = 6, ["a", "b", "c"]
CONCEPTS = [f"c::{j}" for j in range(K)]


def _tables(folder: Path, crossfit_ids: list[str] | bool | None = None) -> Path:
    """Train concepts far cleaner in-sample than out-of-fold, as a probe's are."""
    rng = np.random.default_rng(0)
    proto = rng.random((3, K)) < 0.5
    for split, n, noise in (("train", 90, 0.2), ("val", 60, 2.0), ("test", 90, 2.0)):
        y = np.arange(n) % 3
        labels = (proto[y] ^ (rng.random((n, K)) < 0.1)).astype(np.uint8)
        probs = 1 / (1 + np.exp(-(3.0 * (2.0 * labels - 1) + rng.normal(0, noise, (n, K)))))
        ids = [f"{split}-{i}" for i in range(n)]
        kw = dict(concept_labels=labels, y=y, concept_names=CONCEPTS, class_names=CLASSES)
        save_concept_table(folder / "concepts" / f"{split}.npz", probs=probs, sample_ids=ids, **kw)
        if split == "train" and crossfit_ids is not False:
            oof = 1 / (1 + np.exp(-(3.0 * (2.0 * labels - 1) + rng.normal(0, 2.0, (n, K)))))
            save_concept_table(folder / "concepts" / "train_crossfit.npz", probs=oof,
                               sample_ids=crossfit_ids or ids, **kw)
    return folder


def test_cross_fitted_concepts_are_the_default_and_the_others_are_reported(tmp_path):
    run = _tables(tmp_path)
    entry = fit_head(run, run, heads=["lr", "cart"])
    assert entry["train_concepts"] == "cross-fitted"
    compared = entry["train_concepts_compared"]
    assert list(compared) == ["cross-fitted", "in-sample", "independent"]
    assert compared["cross-fitted"]["lr"]["raw"]["accuracy"] == entry["heads"]["lr"]["raw"]["accuracy"]

    # the saved head is the one fitted on the calibrated cross-fitted train concepts
    val, oof = (load_concept_table(run / "concepts" / f"{s}.npz") for s in ("val", "train_crossfit"))
    cal = ConceptCalibrator().fit(val.probs, val.concept_labels, CONCEPTS)
    X = cal.transform(oof.probs, CONCEPTS)
    refit = make_head("lr", seed=0).fit(X, np.asarray(CLASSES)[oof.y], CONCEPTS)
    test = load_concept_table(run / "concepts" / "test.npz")
    Xt = cal.transform(test.probs, CONCEPTS)
    saved = load_head(run / "head" / "lr" / "calibrated")
    np.testing.assert_array_equal(saved.predict_proba(Xt, CONCEPTS), refit.predict_proba(Xt, CONCEPTS))

    in_sample = fit_head(run, tmp_path / "paper", heads=["lr", "cart"], train_concepts="in-sample",
                         compare_train_concepts=False)
    assert list(in_sample["train_concepts_compared"]) == ["in-sample"]
    for kind in ("raw", "calibrated"):
        assert in_sample["heads"]["cart"][kind]["accuracy"] == compared["in-sample"]["cart"][kind]["accuracy"]

    md = (run / "tables" / "heads.md").read_text()
    assert "## Heads by training concepts" in md and "true concepts (independent) calib." in md
    assert "Heads fitted on **cross-fitted** train concepts" in md
    frame = pd.read_csv(run / "tables" / "heads.csv")
    assert set(frame["train_concepts"]) == {"cross-fitted", "in-sample", "independent"}
    assert json.loads((run / "metrics.json").read_text())["fit_head"]["train_concepts"] == "cross-fitted"


def test_without_a_cross_fitted_table_auto_means_in_sample(tmp_path):
    run = _tables(tmp_path, crossfit_ids=False)
    entry = fit_head(run, run, heads=["lr"])
    assert entry["train_concepts"] == "in-sample"
    assert list(entry["train_concepts_compared"]) == ["in-sample", "independent"]
    with pytest.raises(ValueError, match=r"needs concepts/train_crossfit.npz.*--crossfit_folds 5"):
        fit_head(run, run, heads=["lr"], train_concepts="cross-fitted")


def test_a_cross_fitted_table_of_other_rows_is_refused(tmp_path):
    run = _tables(tmp_path, crossfit_ids=[f"other-{i}" for i in range(90)])
    with pytest.raises(ValueError, match=r"train_crossfit.npz does not hold the rows of concepts/train.npz"):
        fit_head(run, run, heads=["lr"])


def test_independent_heads_train_on_the_true_concepts(tmp_path):
    run = _tables(tmp_path)
    train = load_concept_table(run / "concepts" / "train.npz")
    cal = ConceptCalibrator().fit(train.probs, train.concept_labels, CONCEPTS)
    X = train_inputs("independent", train, None, cal)
    for kind in ("raw", "calibrated"):
        np.testing.assert_array_equal(X[kind], train.concept_labels.astype(float))
    assert resolve_train_concepts("auto", False) == "in-sample"
    with pytest.raises(ValueError, match="train_concepts must be auto or one of"):
        resolve_train_concepts("sequential", True)
