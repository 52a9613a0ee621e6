"""notebooks/inspect_rules.ipynb: committed without outputs, and it runs on a tiny run directory."""

from __future__ import annotations

from pathlib import Path

import nbformat
import numpy as np
import pytest
import yaml
from nbclient import NotebookClient

from cbm.data import ConceptDataModule
from cbm.data.concept_tables import save_concept_table
from cbm.heads.fit import fit_head

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "inspect_rules.ipynb"
DATA = {"dataset": "synthetic", "dataset_kwargs": {"n_per_class": 10, "n_classes": 6, "n_heldout": 2},
        "image_size": 32}


@pytest.fixture
def tiny_run(tmp_path) -> Path:
    """A run directory without a trained detector: concept tables are the synthetic world's true
    concepts with noise (a stand-in detector), then the real ``fit-head`` job."""
    run = tmp_path / "run"
    (run / "concepts").mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump({"data": DATA}))
    table = ConceptDataModule(**DATA).table
    rng = np.random.default_rng(0)
    for split in ("train", "val", "test", "novel"):
        rows = table.indices(split)
        labels = table.concepts[rows]
        probs = np.clip(0.1 + 0.8 * labels + rng.normal(0, 0.1, labels.shape), 0, 1)
        save_concept_table(run / "concepts" / f"{split}.npz", probs=probs.astype(np.float32),
                           concept_labels=labels, y=table.y[rows], concept_names=table.concept_names,
                           class_names=table.class_names, sample_ids=table.sample_ids[rows], split=split)
    fit_head(run, run, heads=["ferl-medium", "ferl-deep"])
    return run


def test_committed_notebook_has_no_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code, "the notebook has no code cells"
    for cell in code:
        assert cell.outputs == [] and cell.execution_count is None, cell.source[:60]
    params = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1 and "FERL_RUN_DIR" in params[0].source


def test_notebook_executes_on_a_tiny_run(tiny_run, monkeypatch):
    monkeypatch.setenv("FERL_RUN_DIR", str(tiny_run))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=180, kernel_name="python3",
                   resources={"metadata": {"path": str(tiny_run)}}).execute()  # raises on a failing cell
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    markdown = "".join(o.get("data", {}).get("text/markdown", "") for o in outputs)
    html = "".join(o.get("data", {}).get("text/html", "") for o in outputs)
    pngs = sum("image/png" in o.get("data", {}) for o in outputs)
    assert f"{tiny_run}: 24 concepts, 8 classes" in text and "ferl-deep on calibrated concepts" in text
    assert "| rule | IF | THEN | confidence | support | alone | distribution |" in markdown  # the rule list
    assert "Prediction **" in markdown and "**Rules that fired**" in markdown
    assert "joint OOD score" in markdown  # the kind the run's threshold flags with
    assert "**Intervened concepts**" in markdown and "Before the intervention: prediction" in markdown
    assert "firing" in html and "routing loss" in html  # fired rules and anomalous attributes tables
    assert pngs >= 3  # the tree and at least two example figures
    assert "novelty threshold: joint OOD score >" in text and "ood_flag" in html  # Pipeline rows
