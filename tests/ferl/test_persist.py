"""ferl.io.persist: whole-folder saves behind one pointer, step journals, locks; kills at every step."""

import errno
import hashlib
import io
import json
import os
import random
import shutil
import signal
import time

import numpy as np
import pytest

from ferl import FERLClassifier
from ferl.io import persist


@pytest.fixture(scope="module")
def two_models():
    rng = np.random.default_rng(0)
    X = rng.random((150, 4))
    a = FERLClassifier(random_state=0).fit(X, (X[:, 0] > 0.5).astype(int))
    b = FERLClassifier(random_state=0).fit(X, (X[:, 1] + X[:, 2] > 1).astype(int))
    assert not np.array_equal(a.predict_proba(X), b.predict_proba(X))
    return X, a, b


def _which(folder, X, a, b) -> str:
    """'old' or 'new' when the folder loads as model a or b (anything else fails the test)."""
    proba = FERLClassifier.load(folder).predict_proba(X)
    if np.array_equal(proba, a.predict_proba(X)):
        return "old"
    assert np.array_equal(proba, b.predict_proba(X)), "the folder loads as neither model"
    return "new"


#: Kill points tried for one save; `test_the_kill_points_cover_every_step_of_a_save` checks enough.
SAVE_STEPS = 20


def test_a_save_makes_one_version_current_and_deletes_the_previous(tmp_path, two_models):
    X, a, b = two_models
    a.save(tmp_path)
    first = persist.current_folder(tmp_path)
    b.save(tmp_path)
    second = persist.current_folder(tmp_path)
    assert first != second and not first.exists()
    assert {p.name for p in tmp_path.iterdir()} == {persist.POINTER, ".lock", second.name}
    assert _which(tmp_path, X, a, b) == "new"


def test_a_model_saved_before_versions_still_loads_and_is_replaced_cleanly(tmp_path, two_models):
    X, a, b = two_models
    a.save(tmp_path / "v")
    shutil.copytree(persist.current_folder(tmp_path / "v"), tmp_path / "flat")  # the layout before versions
    (tmp_path / "flat" / "notes.txt").write_text("mine")
    assert _which(tmp_path / "flat", X, a, b) == "old"
    b.save(tmp_path / "flat")
    assert _which(tmp_path / "flat", X, a, b) == "new"
    names = {p.name for p in (tmp_path / "flat").iterdir()}
    assert "model.npz" not in names and "notes.txt" in names  # only the model's own files go


@pytest.mark.parametrize("k", range(1, SAVE_STEPS + 1))
def test_a_kill_at_any_step_of_a_save_leaves_the_old_or_the_new_model(tmp_path, two_models, child, k):
    X, a, b = two_models
    a.save(tmp_path)
    status = child.run(lambda: b.save(tmp_path), kill_at=k)
    killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    state = _which(tmp_path, X, a, b)
    assert state == "new" if not killed else state in ("old", "new")


def test_the_next_save_clears_what_a_kill_left(tmp_path, two_models, child):
    X, a, b = two_models
    a.save(tmp_path)
    assert os.WIFSIGNALED(child.run(lambda: b.save(tmp_path), kill_at=4))  # inside the new version
    assert len([p for p in tmp_path.iterdir() if p.name.startswith("v-")]) == 2
    b.save(tmp_path)
    assert len([p for p in tmp_path.iterdir() if p.name.startswith("v-")]) == 1
    assert _which(tmp_path, X, a, b) == "new"


def test_the_kill_points_cover_every_step_of_a_save(tmp_path, two_models, child, monkeypatch):
    X, a, b = two_models
    a.save(tmp_path)
    assert 8 <= child.count_steps(monkeypatch, lambda: b.save(tmp_path)) < SAVE_STEPS


def test_25_random_kills_during_a_save_loop_leave_a_loadable_model(tmp_path, two_models):
    X, a, b = two_models
    a.save(tmp_path)
    rng = random.Random(0)
    seen = []
    for _ in range(25):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child saves b, a, b, a... until killed
            os.close(read)
            os.write(write, b"go")
            for i in range(10_000):
                (b if i % 2 == 0 else a).save(tmp_path)
            os._exit(0)
        os.close(write)
        os.read(read, 2)
        os.close(read)
        time.sleep(rng.uniform(0, 0.05))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        seen.append(_which(tmp_path, X, a, b))
    assert set(seen) <= {"old", "new"}


def test_a_full_disk_leaves_the_old_model_and_no_debris(tmp_path, two_models, monkeypatch):
    X, a, b = two_models
    a.save(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    real = persist.atomic_write_bytes.__globals__["os"].fsync
    calls = [0]

    def fsync(fd):
        calls[0] += 1
        if calls[0] == 2:  # the second file of the new version
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(OSError, match="No space left"):
        b.save(tmp_path)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert _which(tmp_path, X, a, b) == "old"


def test_a_changed_file_or_a_broken_pointer_is_named_on_load(tmp_path, two_models):
    X, a, _ = two_models
    a.save(tmp_path)
    pointer = tmp_path / persist.POINTER
    doc = json.loads(pointer.read_text())
    (persist.current_folder(tmp_path) / "model.json").write_text("{}")
    with pytest.raises(ValueError, match="changed or damaged after saving"):
        FERLClassifier.load(tmp_path)
    pointer.write_text(json.dumps({**doc, "current": "v-20000101T000000-00000000"}))
    with pytest.raises(ValueError, match="which is missing"):
        FERLClassifier.load(tmp_path)
    pointer.write_text("[]")
    with pytest.raises(ValueError, match="not the pointer of a versioned folder"):
        FERLClassifier.load(tmp_path)


def test_a_second_process_is_refused_the_lock_until_the_first_ends(tmp_path):
    read, write = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - holds the lock until told to stop
        with persist.folder_lock(tmp_path):
            os.write(write, b"held")
            os.read(go_r, 1)
        os._exit(0)
    os.read(read, 4)
    with pytest.raises(persist.FolderBusyError, match=rf"being written by another process .*\b{pid}\b"):
        with persist.folder_lock(tmp_path):
            pass
    os.kill(pid, signal.SIGKILL)  # even a killed holder frees the lock
    os.waitpid(pid, 0)
    with persist.folder_lock(tmp_path), persist.folder_lock(tmp_path):  # re-entrant
        pass


# ----------------------------------------------------------------------------- multi-file steps
def _step(root, text, model):
    with persist.StepWriter(root) as step:
        step.write_text(root / "metrics.json", json.dumps({"v": text}))
        step.write_text(root / "tables" / "t.md", text)
        step.folder(root / "head", model.save)


def _step_state(root, X, a, b) -> str:
    with persist.folder_lock(root):  # the next writer finishes a committed step first
        pass
    metric = json.loads((root / "metrics.json").read_text())["v"]
    assert (root / "tables" / "t.md").read_text() == metric
    assert {"old": "old", "new": "new"}[metric] == _which(root / "head", X, a, b)
    assert not list(root.glob(".step-*"))
    return metric


def test_the_kill_points_cover_every_step_of_a_job_step(tmp_path, two_models, child, monkeypatch):
    X, a, b = two_models
    _step(tmp_path, "old", a)
    assert 20 <= child.count_steps(monkeypatch, lambda: _step(tmp_path, "new", b)) < 45


@pytest.mark.parametrize("k", range(1, 45, 2))
def test_a_kill_at_any_step_of_a_job_step_leaves_all_old_or_all_new(tmp_path, two_models, child, k):
    X, a, b = two_models
    _step(tmp_path, "old", a)
    status = child.run(lambda: _step(tmp_path, "new", b), kill_at=k)
    state = _step_state(tmp_path, X, a, b)
    if not os.WIFSIGNALED(status):
        assert state == "new"


def test_an_error_inside_a_step_changes_nothing(tmp_path, two_models):
    X, a, b = two_models
    _step(tmp_path, "old", a)
    with pytest.raises(RuntimeError, match="boom"), persist.StepWriter(tmp_path) as step:
        step.write_text(tmp_path / "metrics.json", json.dumps({"v": "new"}))
        step.folder(tmp_path / "head", b.save)
        raise RuntimeError("boom")
    assert _step_state(tmp_path, X, a, b) == "old"
    assert len([p for p in (tmp_path / "head").iterdir() if p.name.startswith("v-")]) == 1


def test_a_signal_during_a_commit_arrives_after_it(tmp_path, two_models, monkeypatch):
    X, a, b = two_models
    _step(tmp_path, "old", a)

    class Stop(Exception):
        pass

    def handler(signum, frame):
        raise Stop

    previous = signal.signal(signal.SIGTERM, handler)
    real = os.replace
    sent = []

    def replace(src, dst):
        if ".step-" in str(src) and ".step-" not in str(dst) and not sent:  # first one the commit makes
            sent.append(dst)
            signal.raise_signal(signal.SIGTERM)
        return real(src, dst)

    try:
        monkeypatch.setattr(os, "replace", replace)
        with pytest.raises(Stop):
            _step(tmp_path, "new", b)
    finally:
        signal.signal(signal.SIGTERM, previous)
    monkeypatch.undo()
    assert sent and _step_state(tmp_path, X, a, b) == "new"


def test_write_model_refuses_object_arrays_and_reads_its_own_checksum(tmp_path):
    with pytest.raises(ValueError, match="object dtype"):
        persist.write_model(tmp_path, {}, {"x": np.array([{}], dtype=object)})
    persist.write_model(tmp_path, {"a": 1}, {"x": np.arange(3)})
    meta, arrays = persist.read_model(tmp_path)
    assert meta["a"] == 1 and arrays["x"].tolist() == [0, 1, 2]
    blob = io.BytesIO()
    np.savez(blob, x=np.arange(3))
    assert meta["npz_sha256"] == hashlib.sha256(blob.getvalue()).hexdigest()
