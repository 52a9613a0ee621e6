"""The predictions page's summary table, and the one kind of OOD score a head's outputs use."""

from pathlib import Path

import numpy as np
import pytest
import torch

from cbm.heads import make_head
from cbm.heads.operating import certified_radius
from cbm.predict.output import _summary, page_files
from cbm.predict.pipeline import COLUMNS, Pipeline, Predictions
from cbm.report.explanation import radius_sentence

THRESHOLD = {"kind": "typical", "accept": 0.95, "value": 1.0, "fitted_on": "val"}


def test_the_predictions_page_writes_each_float_column_in_one_format():
    # fresh-clone finding: one ignorance column read 0.271, 0.27, 0 and 0.00232 (.3g)
    def row(ignorance, score):
        r = dict.fromkeys(COLUMNS)
        r.update({"input": "a.png", "class": "c", "set": ["c"], "abstained": False, "ood_flag": False,
                  "ignorance": ignorance, "ood_score": score, "anomalous_attributes": [("x", 0.5)]})
        return r

    rows = [row(0.271, 1.2874), row(0.27, 32.683), row(0.0, 303.0921), row(0.00232, 0.5)]
    lines = _summary(Predictions(rows=rows, inputs=[None] * 4, explain=lambda i: None,
                                 threshold=THRESHOLD))[2:]
    cells = [line.split(" | ")[5:7] for line in lines]
    assert cells == [["0.271", "1.29"], ["0.270", "32.68"], ["0.000", "303.09"], ["0.002", "0.50"]]


def test_threshold_flag_and_explanation_use_and_name_one_kind():
    """fit-head's threshold (`FERLHead.fit_ood_threshold`), predict's rows, its page and the
    explanations all read the learned weights' energy of a head with learned weights."""
    rng = np.random.default_rng(0)
    names = [f"c{j}" for j in range(6)]
    y = rng.integers(0, 3, 150)
    X = np.clip(0.2 + 0.6 * (np.eye(3)[y] @ rng.random((3, 6)) > 0.5) + rng.normal(0, 0.1, (150, 6)), 0, 1)
    head = make_head("ferl-deep", settings="concepts").fit(X[:120], np.array(["a", "b", "c"])[y[:120]], names)
    threshold = head.fit_ood_threshold(X[:120])
    assert threshold["kind"] == head.ood_kind == "energy"
    pipe = Pipeline(run_dir=Path("run"), head_name="ferl-deep", inputs="raw", head=head, calibrator=None,
                    threshold=threshold, detector=None, transform=None, device=torch.device("cpu"))
    Z = np.vstack([X[120:124], 1.0 - X[124:126]])
    pred = pipe.predict_concepts(Z)
    energy = head.model_.ood_score(Z, "energy")
    assert [r["ood_kind"] for r in pred.rows] == ["energy"] * len(Z)
    assert [r["ood_score"] for r in pred.rows] == energy.tolist()
    assert [r["ood_flag"] for r in pred.rows] == (energy > threshold["value"]).tolist()
    explained = pred.explain(0)
    assert explained.ood_kind == "energy" and explained.ood_score == pytest.approx(energy[0], rel=1e-12)
    page, _ = page_files(pred, limit=1)
    assert "| energy OOD score |" in page and "when its energy OOD score exceeds" in page
    assert "energy OOD score = " in page and "energy OOD score " + f"{energy[0]:.4g}" in page


def test_each_explained_input_reads_its_certified_radius_in_concept_units():
    rng = np.random.default_rng(0)
    names = [f"c{j}" for j in range(6)]
    y = rng.integers(0, 3, 150)
    X = np.clip(0.2 + 0.6 * (np.eye(3)[y] @ rng.random((3, 6)) > 0.5) + rng.normal(0, 0.1, (150, 6)), 0, 1)
    head = make_head("ferl-deep", settings="concepts").fit(X[:120], np.array(["a", "b", "c"])[y[:120]], names)
    pipe = Pipeline(run_dir=Path("run"), head_name="ferl-deep", inputs="raw", head=head, calibrator=None,
                    threshold=head.fit_ood_threshold(X[:120]), detector=None, transform=None,
                    device=torch.device("cpu"))
    pred = pipe.predict_concepts(X[120:126])
    radius = certified_radius(head, X[120:126])
    assert (radius > 0).sum() >= 3 and (radius < 1).all()
    page, _ = page_files(pred, limit=6)
    for i, r in enumerate(radius):
        assert pred.explain(i).robustness_radius == r
        cls = pred.rows[i]["class"]
        sentence = (f"Certified radius {r:.3g}: any change of at most {r:.3g} in each concept probability "
                    f"(within [0, 1]) leaves the class {cls}." if r > 0 else "Certified radius 0: no change")
        assert sentence in page
    assert page.count("Certified radius ") == 6


@pytest.mark.parametrize("radius, text", [
    (0.0, "Certified radius 0: no change of the concept probabilities is certified to leave the class."),
    (0.01234, "Certified radius 0.0123: any change of at most 0.0123 in each concept probability (within "
              "[0, 1]) leaves the class a\\|b."),
    (1.0, "Certified radius 1: every concept vector in [0, 1] gets the class a\\|b, whatever"),
    (np.inf, "Certified radius inf: every concept vector in [0, 1] gets the class a\\|b"),
])
def test_the_radius_sentence_reads_each_kind_of_radius(radius, text):
    assert radius_sentence(radius, "a|b").startswith(text)
