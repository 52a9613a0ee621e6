"""The write machinery behind `ferl.io.persist`: atomic files, folder locks, staged versions, step journals.

See `ferl.io.persist` for the guarantees; this module holds the mechanics so that the public module
stays short.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no advisory locks, writers are not serialised
    fcntl = None

#: The pointer file of a versioned folder.
POINTER = "current.json"
LOCK_NAME = ".lock"
LAYOUT = {"layout": "versioned folder", "layout_version": 1}
VERSION_NAME = re.compile(r"v-\d{8}T\d{6}-[0-9a-f]{8}")
_STEP_PREFIX = ".step-"
_JOURNAL = "COMMIT.json"


# ----------------------------------------------------------------------------- single files
def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (temporary file in the same folder, then rename).

    Parent folders are created. The file gets the permissions of a plain ``open(path, "wb")``
    (0666 minus the umask), not the private 0600 of the temporary file.

    Returns
    -------
    Path
        ``path``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write UTF-8 ``text`` to ``path`` atomically (see `atomic_write_bytes`)."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------- locks
class FolderBusyError(OSError):
    """Another process holds the folder's write lock (`folder_lock`); the message names it."""


_HELD: set[str] = set()  # resolved folders whose lock this process holds
_HELD_GUARD = threading.Lock()


@contextmanager
def folder_lock(folder: str | os.PathLike) -> Iterator[Path]:
    """Hold the write lock of ``folder`` (created if needed) for the ``with`` block.

    The lock is an advisory ``flock`` on ``<folder>/.lock``, which records the holder's pid and
    command. It is re-entrant within a process and released by the kernel when the process
    ends, however it ends. On entry, job steps that a killed writer committed but did not
    finish applying (`StepWriter`) are applied, and abandoned ones removed.

    Raises
    ------
    FolderBusyError
        Another process holds the lock (its pid, command and start time are named).
    OSError
        The folder cannot be written (read-only, no space...).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    key = str(folder.resolve())
    with _HELD_GUARD:
        nested = key in _HELD
        _HELD.add(key)
    if nested:
        yield folder
        return
    try:
        fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o666 & ~_umask())
    except BaseException:
        _HELD.discard(key)
        raise
    try:
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise FolderBusyError(f"{folder} is being written by another process ({_holder(fd)}); wait "
                                      "for it to finish or write to another folder") from None
        holder = {"pid": os.getpid(), "command": " ".join(sys.argv),
                  "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder).encode(), 0)
        _settle_steps(folder)
        yield folder
    finally:
        with _HELD_GUARD:
            _HELD.discard(key)
        os.close(fd)  # releases the flock


def _holder(fd: int) -> str:
    """Who holds a lock, from what its holder wrote into the lock file."""
    text = os.pread(fd, 4096, 0).decode("utf-8", "replace")
    try:
        doc = json.loads(text)
        return f"pid {doc['pid']}, `{doc['command']}`, since {doc['since']}"
    except (ValueError, KeyError, TypeError):
        return text.strip() or "unknown"


# ----------------------------------------------------------------------------- versioned folders
_STAGING = threading.local()  # version folders being written by this thread


def staging_dirs() -> list[Path]:
    if not hasattr(_STAGING, "dirs"):
        _STAGING.dirs = []
    return _STAGING.dirs


def _new_version_name() -> str:
    return f"v-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{secrets.token_hex(4)}"


def _seal(folder: Path) -> dict[str, dict]:
    """fsync every file under ``folder`` and the folders themselves; return each file's size and hash."""
    files = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            _fsync(path)
            files[path.relative_to(folder).as_posix()] = {"bytes": len(data),
                                                          "sha256": hashlib.sha256(data).hexdigest()}
    for sub in sorted((p for p in folder.rglob("*") if p.is_dir()), reverse=True):
        _fsync(sub)
    _fsync(folder)
    if not files:
        raise ValueError(f"nothing was written into {folder}")
    return files


def stage_version(folder: Path, write: Callable[[Path], object]) -> tuple[str, dict]:
    """Write a new, not yet current version of ``folder`` with ``write``; return its name and files."""
    folder.mkdir(parents=True, exist_ok=True)
    name = _new_version_name()
    version = folder / name
    version.mkdir()
    staging_dirs().append(version.resolve())
    try:
        write(version)
        files = _seal(version)
    except BaseException:
        shutil.rmtree(version, ignore_errors=True)
        raise
    finally:
        staging_dirs().pop()
    return name, files


def point_to_version(folder: Path, name: str, files: dict) -> None:
    """Make version ``name`` current (the commit), then delete older versions and flat-layout files."""
    doc = {**LAYOUT, "current": name, "files": files}
    atomic_write_text(folder / POINTER, json.dumps(doc, indent=1, sort_keys=True) + "\n")
    _fsync(folder)
    for child in folder.iterdir():
        if child.name == name:
            continue
        if child.is_dir() and VERSION_NAME.fullmatch(child.name):
            shutil.rmtree(child, ignore_errors=True)
        elif child.is_file() and child.name in files:  # a pre-versions save of the same files
            child.unlink(missing_ok=True)


# ----------------------------------------------------------------------------- multi-file steps
class StepWriter:
    """Write the files and saved folders of one job step so that they become current together.

    Use as a context manager under ``root`` (whose `folder_lock` it holds): `path` gives where to
    write the new content of a file, `write_text` writes one, `folder` stages a new version of a
    saved folder (as `save_folder` would). On a clean exit the step is committed: a journal
    listing every replacement is written atomically (the commit point), then applied with
    SIGINT / SIGTERM deferred; a kill after the journal is finished by the next writer of
    ``root``. On an exception nothing becomes current and the staged files are removed. `remove`
    deletes a file in the same commit (after the replacements).

    Examples
    --------
    >>> with StepWriter(run) as step:
    ...     step.write_text(run / "metrics.json", text)
    ...     step.folder(run / "head" / "lr", head.save)
    """

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)
        self._files: list[tuple[str, str]] = []
        self._folders: list[tuple[str, str, dict]] = []
        self._removes: list[str] = []

    def __enter__(self) -> StepWriter:
        self._lock = folder_lock(self.root)
        self._lock.__enter__()
        self._stage = self.root / f"{_STEP_PREFIX}{_new_version_name()}"
        try:
            self._stage.mkdir()
        except BaseException:
            self._lock.__exit__(*sys.exc_info())
            raise
        return self

    def _rel(self, path: str | os.PathLike) -> str:
        rel = os.path.relpath(Path(path).resolve(), self.root.resolve())
        if rel == ".." or rel.startswith(".." + os.sep):
            raise ValueError(f"{path} lies outside the step's folder {self.root}")
        return Path(rel).as_posix()

    def path(self, final: str | os.PathLike) -> Path:
        """The staging path to write the new content of file ``final`` to (keeps its suffix)."""
        staged = f"{len(self._files)}-{Path(final).name}"
        self._files.append((staged, self._rel(final)))
        return self._stage / staged

    def write_text(self, final: str | os.PathLike, text: str) -> None:
        """Stage ``text`` as the new content of file ``final``."""
        atomic_write_text(self.path(final), text)

    def remove(self, final: str | os.PathLike) -> None:
        """Delete file ``final`` (if it exists) when the step is applied: the old files or the new set."""
        self._removes.append(self._rel(final))

    def folder(self, final: str | os.PathLike, write: Callable[[Path], object]) -> None:
        """Stage a new version of the saved folder ``final``, written by ``write(version)``."""
        rel = self._rel(final)
        self._folders.append((rel, *stage_version(self.root / rel, write)))

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is not None:
                self._discard()
                return
            with _signals_deferred():  # committed and applied, or not committed at all
                try:
                    for staged, _ in self._files:
                        _fsync(self._stage / staged)
                    journal = {"files": self._files, "folders": self._folders, "removes": self._removes}
                    atomic_write_text(self._stage / _JOURNAL, json.dumps(journal) + "\n")
                except BaseException:
                    self._discard()
                    raise
                _apply_step(self.root, self._stage)
        finally:
            self._lock.__exit__(exc_type, exc, tb)

    def _discard(self) -> None:
        shutil.rmtree(self._stage, ignore_errors=True)
        for rel, name, _ in self._folders:
            shutil.rmtree(self.root / rel / name, ignore_errors=True)


def _apply_step(root: Path, stage: Path) -> None:
    """Carry out a committed step's journal (idempotent), then delete its staging folder."""
    journal = json.loads((stage / _JOURNAL).read_text())
    for staged, final in journal["files"]:
        src, dst = stage / staged, root / final
        if src.exists():
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.replace(src, dst)
            _fsync(dst.parent)
    for rel, name, files in journal["folders"]:
        if (root / rel / name).is_dir():
            point_to_version(root / rel, name, files)
    for final in journal.get("removes", []):  # absent from journals written before removals
        if (root / final).is_file():
            os.unlink(root / final)
    shutil.rmtree(stage)


def _settle_steps(root: Path) -> None:
    """Finish the committed steps a killed writer left in ``root``; remove uncommitted ones."""
    for stage in sorted(root.glob(f"{_STEP_PREFIX}*")):
        if not stage.is_dir():
            continue
        try:
            json.loads((stage / _JOURNAL).read_text())
        except (OSError, ValueError):  # no journal (or a torn one): the step never committed
            shutil.rmtree(stage, ignore_errors=True)
            continue
        _apply_step(root, stage)


@contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM back for the block, then deliver them (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    if any(h is None for h in previous.values()):  # a handler set outside Python: cannot restore it
        yield
        return
    for s in previous:
        signal.signal(s, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for signum in caught:
            signal.raise_signal(signum)
