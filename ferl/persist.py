"""Atomic file writes and pickle-free model persistence (a JSON document plus an ``.npz``).

Every file of the project is written atomically (temporary file in the same folder, then
``os.replace``), so an interrupted write never leaves a truncated file. A model's JSON carries a
schema version and the SHA-256 of its ``.npz`` so a mismatched pair is detected on load.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
from pathlib import Path

import numpy as np

__all__ = ["SCHEMA_VERSION", "atomic_write_bytes", "atomic_write_text", "write_model", "read_model"]

SCHEMA_VERSION = 1
JSON_NAME = "model.json"
NPZ_NAME = "model.npz"


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


def write_model(path: str | os.PathLike, meta: dict, arrays: dict[str, np.ndarray]) -> Path:
    """Save a model as ``path/model.json`` + ``path/model.npz``.

    Parameters
    ----------
    path : path-like
        A folder (created if needed).
    meta : dict
        JSON-serialisable description (parameters, classes, feature names...).
    arrays : dict of str to ndarray
        Numeric or fixed-width string arrays (no object dtype).

    Returns
    -------
    Path
        The folder.

    Raises
    ------
    ValueError
        An array has object dtype (it would need pickle).
    """
    path = Path(path)
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
    atomic_write_bytes(path / NPZ_NAME, blob)
    atomic_write_bytes(path / JSON_NAME, text)
    return path


def read_model(path: str | os.PathLike) -> tuple[dict, dict[str, np.ndarray]]:
    """Load what `write_model` saved.

    Raises
    ------
    FileNotFoundError
        ``model.json`` or ``model.npz`` is missing.
    ValueError
        Unknown schema version, or the ``.npz`` does not match the JSON's checksum.
    """
    path = Path(path)
    for name in (JSON_NAME, NPZ_NAME):
        if not (path / name).is_file():
            raise FileNotFoundError(f"{path / name} not found (a saved model has {JSON_NAME} and {NPZ_NAME})")
    try:
        doc = json.loads((path / JSON_NAME).read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path / JSON_NAME} is not valid JSON: {err}") from err
    if not isinstance(doc, dict):
        raise ValueError(f"{path / JSON_NAME} does not hold a JSON object (a saved model's description)")
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
