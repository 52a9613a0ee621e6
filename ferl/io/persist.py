"""Atomic saves, from one file to a whole folder to a multi-file job step, and pickle-free models.

One rule at every level: the new version is written completely beside the old one, one
``os.replace`` makes it current, and only then is the old one deleted. A kill at any instant
leaves the old or the new version loadable; an ``OSError`` (a full disk) leaves the old one.

* **A file** (`atomic_write_bytes`): a temporary file in the same folder, fsync, ``os.replace``.
* **A folder holding one saved object** (`save_folder`: a FERL model, a concept head): its files
  go into a fresh version folder ``<folder>/v-<UTC time>-<random>/``; the small pointer file
  ``<folder>/current.json`` (the version's name, every file's size and SHA-256) is replaced
  last, and `current_folder` follows it. A folder without ``current.json`` (the layout before
  versions: files side by side) still loads. A save nested in another (a FERL model inside a
  head) writes plain files into the enclosing version.
* **A job step writing several files and folders** (`StepWriter`): every new file and folder
  version is staged, then one journal ``<root>/.step-*/COMMIT.json`` is written (the commit
  point) and applied. A journal left by a killed process is applied by the next writer that
  takes the folder's lock, before it reads anything.

Writers of one folder hold `folder_lock` (an advisory ``flock`` on ``<folder>/.lock``, released
by the kernel when the process dies, even by SIGKILL); a second process is refused at once with
`FolderBusyError`. A model is ``model.json`` (schema version, description, SHA-256 of the arrays)
+ ``model.npz`` (`write_model`, `read_model`), loaded without pickle.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ferl.io.atomic import (
    LAYOUT,
    POINTER,
    VERSION_NAME,
    FolderBusyError,
    StepWriter,
    atomic_write_bytes,
    atomic_write_text,
    folder_lock,
    point_to_version,
    stage_version,
    staging_dirs,
)

__all__ = [
    "POINTER", "SCHEMA_VERSION", "FolderBusyError", "StepWriter", "atomic_write_bytes",
    "atomic_write_text", "current_folder", "folder_lock", "read_json_object", "read_model", "save_folder",
    "write_model",
]

SCHEMA_VERSION = 1
JSON_NAME = "model.json"
NPZ_NAME = "model.npz"


def save_folder(folder: str | os.PathLike, write: Callable[[Path], object]) -> Path:
    """Replace the object saved in ``folder`` as a whole: the old version or the new, never a mix.

    ``write(version)`` writes the object's files into a fresh, empty version folder inside
    ``folder``; they are fsynced, then ``folder/current.json`` is replaced to name the new
    version (the commit), then older versions are deleted. Files of ``folder`` that are not part
    of a save are left alone. Called while another save is writing a version that contains
    ``folder``, ``write(folder)`` is called directly: the enclosing save commits.

    Parameters
    ----------
    folder : path-like
        The object's folder (created if needed).
    write : callable
        ``write(path)`` writes at least one file into ``path``.

    Returns
    -------
    Path
        ``folder``.

    Raises
    ------
    FolderBusyError
        Another process is writing ``folder``.
    OSError, ValueError
        From ``write`` or the file system; the current version is then unchanged.
    """
    folder = Path(folder)
    resolved = folder.resolve()
    if any(resolved == s or s in resolved.parents for s in staging_dirs()):
        folder.mkdir(parents=True, exist_ok=True)
        write(folder)
        return folder
    with folder_lock(folder):
        point_to_version(folder, *stage_version(folder, write))
    return folder


def current_folder(folder: str | os.PathLike, verify: bool = True) -> Path:
    """The folder holding the current files of an object saved in ``folder``.

    ``folder/<version>`` as named by ``folder/current.json``, or ``folder`` itself when there
    is no pointer (a save made before versions, or a version folder given directly).

    Parameters
    ----------
    verify : bool, default=True
        Check that every file the pointer lists has its recorded size and SHA-256.

    Raises
    ------
    ValueError
        An unreadable pointer, a missing version folder, or a file that differs from the pointer's
        record (changed or damaged after saving).
    """
    folder = Path(folder)
    pointer = folder / POINTER
    if not pointer.is_file():
        return folder
    try:
        doc = json.loads(pointer.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{pointer} is not valid JSON: {err}") from err
    if not isinstance(doc, dict) or any(doc.get(k) != v for k, v in LAYOUT.items()) \
            or not VERSION_NAME.fullmatch(str(doc.get("current"))) or not isinstance(doc.get("files"), dict):
        raise ValueError(f"{pointer} is not the pointer of a versioned folder ({LAYOUT})")
    version = folder / doc["current"]
    if not version.is_dir():
        raise ValueError(f"{pointer} names version {doc['current']!r}, which is missing from {folder}")
    if verify:
        for rel, info in doc["files"].items():
            path = version / rel
            data = path.read_bytes() if path.is_file() else None
            if data is None or not isinstance(info, dict) or len(data) != info.get("bytes") \
                    or hashlib.sha256(data).hexdigest() != info.get("sha256"):
                raise ValueError(f"{path} is missing or differs from its record in {pointer} (size or "
                                 "SHA-256): it was changed or damaged after saving; save the object again")
    return version


# ----------------------------------------------------------------------------- models
def write_model(path: str | os.PathLike, meta: dict, arrays: dict[str, np.ndarray]) -> Path:
    """Save a model as ``model.json`` + ``model.npz`` in a new version of folder ``path``.

    See `save_folder`: the previous model stays loadable until the new one is complete.

    Parameters
    ----------
    path : path-like
        A folder (created if needed).
    meta : dict
        JSON-serialisable description (parameters, classes, feature names...).
    arrays : dict of str to ndarray
        Numeric or fixed-width string arrays (no object dtype); any names (the format is open to
        new arrays).

    Returns
    -------
    Path
        The folder.

    Raises
    ------
    ValueError
        An array has object dtype (it would need pickle), or ``meta`` is not JSON-serialisable.
    """
    for name, arr in arrays.items():
        if np.asarray(arr).dtype == object:
            raise ValueError(f"array {name!r} has object dtype and cannot be saved without pickle")
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    blob = buf.getvalue()
    doc = dict(meta, schema_version=SCHEMA_VERSION, npz_sha256=hashlib.sha256(blob).hexdigest())
    try:  # serialise before writing anything, so a failure leaves an existing model untouched
        text = json.dumps(doc, indent=2, sort_keys=True).encode()
    except (TypeError, ValueError) as err:
        raise ValueError(f"the model description cannot be saved as JSON: {err}") from err

    def write(folder: Path) -> None:
        atomic_write_bytes(folder / NPZ_NAME, blob)
        atomic_write_bytes(folder / JSON_NAME, text)

    return save_folder(path, write)


def read_json_object(path: str | os.PathLike, what: str) -> dict:
    """The JSON object held by the file ``path`` (which exists), e.g. a saved model's description.

    Raises
    ------
    ValueError
        Text that is not UTF-8 or not JSON, or a JSON value other than an object; ``what`` (what
        the object should be) ends that last message.
    """
    try:
        doc = json.loads(Path(path).read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path} is not valid JSON: {err}") from err
    if not isinstance(doc, dict):
        raise ValueError(f"{path} does not hold a JSON object ({what})")
    return doc


def read_model(path: str | os.PathLike) -> tuple[dict, dict[str, np.ndarray]]:
    """Load what `write_model` saved (following ``current.json``; the flat older layout loads too).

    Raises
    ------
    FileNotFoundError
        ``model.json`` or ``model.npz`` is missing.
    ValueError
        Unknown schema version, or the ``.npz`` does not match the JSON's checksum, or a file
        differs from the folder's pointer (`current_folder`).
    """
    path = current_folder(path)
    for name in (JSON_NAME, NPZ_NAME):
        if not (path / name).is_file():
            raise FileNotFoundError(f"{path / name} not found (a saved model has {JSON_NAME} and {NPZ_NAME})")
    doc = read_json_object(path / JSON_NAME, "a saved model's description")
    version = doc.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ValueError(f"{path / JSON_NAME}: schema version {version!r}, expected {SCHEMA_VERSION}")
    blob = (path / NPZ_NAME).read_bytes()
    if hashlib.sha256(blob).hexdigest() != doc.get("npz_sha256"):
        raise ValueError(f"{path / NPZ_NAME} does not match {path / JSON_NAME} (checksum differs)")
    try:
        with np.load(io.BytesIO(blob), allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except Exception as err:  # zipfile.BadZipFile, truncated members, object arrays...
        raise ValueError(f"{path / NPZ_NAME} is not a readable pickle-free .npz: {err}") from err
    return doc, arrays
