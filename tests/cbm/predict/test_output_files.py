"""predict's output folder: replaced as a whole or not at all, only predict's own files touched,
and locked from the start (four reported failures, one test each). A pipeline on a FERL head
fitted on tiny concept vectors: no detector, no run to train."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from cbm.heads import make_head
from cbm.predict import Pipeline, run_predict
from cbm.predict.output import MANIFEST, write_predictions
from ferl.io.persist import FolderBusyError, folder_lock

NAMES = ["shape::round", "shape::square", "colour::red", "colour::blue"]


@pytest.fixture(scope="module")
def pipe() -> Pipeline:
    rng = np.random.default_rng(0)
    X = rng.random((80, 4))
    y = np.where(X[:, 0] > 0.5, "ball", "box")
    head = make_head("ferl-compact", seed=0).fit(X, y, NAMES)
    threshold = {"kind": "typical", "accept": 0.95, "value": 5.0, "fitted_on": "val", "n": 80}
    return Pipeline(run_dir=Path("run"), head_name="ferl-compact", inputs="raw", head=head, calibrator=None,
                    threshold=threshold, detector=None, transform=None, device=torch.device("cpu"))


def _pred(pipe: Pipeline, n: int, errors: dict | None = None, seed: int = 1):
    probs = np.random.default_rng(seed).random((n, 4))
    return pipe.predict_concepts(probs, [f"in_{i}.png" for i in range(n)], errors=errors)


def _files(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and p.name != ".lock"}


def test_a_prediction_of_nothing_leaves_the_previous_output(pipe, tmp_path):
    # reported: a failed predict (no input readable) replaced predictions.csv and deleted every figure
    write_predictions(_pred(pipe, 3), tmp_path)
    before = _files(tmp_path)
    assert {"predictions.csv", "predictions.jsonl", "predictions.md", "predictions/3.png"} <= set(before)
    with pytest.raises(ValueError, match=r"none of the 1 inputs could be read \(typo.png: no such file\); "
                                         r".* is unchanged"):
        write_predictions(_pred(pipe, 1, errors={0: "typo.png: no such file"}), tmp_path)
    assert _files(tmp_path) == before


def test_only_files_an_earlier_predict_wrote_are_removed(pipe, tmp_path):
    # reported: user PNGs in <out>/predictions/ were all deleted by the next page
    mine = tmp_path / "predictions"
    mine.mkdir()
    for name in ("holiday.png", "cat.PNG", "0.png", "12a.png"):
        (mine / name).write_bytes(b"user's " + name.encode())
    (tmp_path / "notes.md").write_text("mine")
    write_predictions(_pred(pipe, 3), tmp_path)
    write_predictions(_pred(pipe, 1), tmp_path)  # a shorter page: figures 2 and 3 are stale
    files = _files(tmp_path)
    assert not (mine / "2.png").exists() and not (mine / "3.png").exists() and (mine / "1.png").is_file()
    for name in ("holiday.png", "cat.PNG", "0.png", "12a.png"):
        assert files[f"predictions/{name}"] == b"user's " + name.encode()
    assert files["notes.md"] == b"mine"
    assert json.loads(files[MANIFEST])["files"] == ["predictions.csv", "predictions.jsonl", "predictions.md",
                                                    "predictions/1.png"]
    write_predictions(_pred(pipe, 1), tmp_path, formats=("csv",), page=False)  # the old page goes too
    assert sorted(_files(tmp_path)) == [MANIFEST, "notes.md", "predictions.csv", *[
        f"predictions/{n}" for n in ("0.png", "12a.png", "cat.PNG", "holiday.png")]]


def test_a_users_file_where_predict_writes_stops_it_before_anything_changes(pipe, tmp_path):
    (tmp_path / "predictions").mkdir()
    (tmp_path / "predictions" / "2.png").write_bytes(b"a user's figure")
    with pytest.raises(ValueError, match=r"2.png exists and was not written by predict"):
        write_predictions(_pred(pipe, 3), tmp_path)
    assert _files(tmp_path) == {"predictions/2.png": b"a user's figure"}
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is a file, not a folder"):
        write_predictions(_pred(pipe, 3), tmp_path / "file")


def test_an_output_of_an_older_predict_is_recognised_by_its_page(pipe, tmp_path):
    write_predictions(_pred(pipe, 3), tmp_path)
    (tmp_path / MANIFEST).unlink()  # as written before the manifest existed
    (tmp_path / "predictions" / "7.png").write_bytes(b"not linked from the page: the user's")
    write_predictions(_pred(pipe, 2), tmp_path)
    assert sorted(p.name for p in (tmp_path / "predictions").iterdir()) == ["1.png", "2.png", "7.png"]


def _state(out: Path, old: dict[str, bytes], new: dict[str, bytes]) -> str:
    with folder_lock(out):
        pass  # the next writer finishes a committed step
    now = _files(out)
    assert not list(out.glob(".step-*"))
    assert now in (old, new), sorted(set(now.items()) ^ set(old.items()))
    return "old" if now == old else "new"


def test_a_kill_at_any_step_leaves_the_old_output_or_the_new(pipe, tmp_path, child, monkeypatch):
    # reported: a kill while the page was written left a new CSV, the old page and mixed figures
    monkeypatch.setattr("cbm.predict.output.evidence_figure", lambda ex, image, title: title)  # quick
    monkeypatch.setattr("cbm.predict.output.figure_png", lambda fig, **kw: f"figure of {fig}".encode())
    big, small = _pred(pipe, 4, seed=1), _pred(pipe, 2, seed=2)
    ref = tmp_path / "ref"
    write_predictions(small, ref)
    new = _files(ref)
    write_predictions(big, ref)
    old = _files(ref)
    with monkeypatch.context() as m:
        steps = child.count_steps(m, lambda: write_predictions(small, ref))
    assert 15 <= steps < 60
    seen = set()
    for k in range(1, steps + 1, 3):
        out = tmp_path / f"k{k}"
        write_predictions(big, out)
        status = child.run(lambda o=out: write_predictions(small, o), kill_at=k)
        seen.add(_state(out, old, new))
        if not os.WIFSIGNALED(status):
            assert _files(out) == new
    assert seen == {"old", "new"}


def test_a_second_predict_into_a_busy_folder_stops_at_once(tmp_path, child):
    # reported: two predicts into one --out both ran; the second now stops before loading the run
    busy = pytest.raises(FolderBusyError, match="being written by another")
    with child.holding_lock(tmp_path / "out"), busy:
        run_predict(str(tmp_path / "no-run"), images=["a.png"], out=str(tmp_path / "out"))
