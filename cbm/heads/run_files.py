"""The run's files ``fit-head`` reads before it fits anything: the ``data`` section of
``config.yaml``, the ``metrics.json`` it merges its entry into, and the paper's Table 4 column to
print beside its own; each refused with a message that names the file when it cannot be read."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

__all__ = ["paper_dataset", "read_metrics", "read_run_config"]


def read_run_config(*folders: Path) -> dict:
    """The ``data`` section of the first ``config.yaml`` found in ``folders`` ({} if none).

    Raises
    ------
    ValueError
        The file is not valid YAML.
    """
    paths = [f / "config.yaml" for f in folders if (f / "config.yaml").is_file()]
    if not paths:
        return {}
    try:
        cfg = yaml.safe_load(paths[0].read_text()) or {}
    except yaml.YAMLError as err:
        raise ValueError(f"{paths[0]} is not valid YAML ({err}); fix or remove it") from err
    data = cfg.get("data") if isinstance(cfg, dict) else None
    return data if isinstance(data, dict) else {}


def read_metrics(path: Path) -> dict:
    """The run's ``metrics.json`` ({} if absent), checked before anything is fitted or written."""
    if not path.is_file():
        return {}
    try:
        doc = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path} exists but is not valid JSON ({err}); fix or remove it") from err
    if not isinstance(doc, dict):
        raise ValueError(f"{path} holds a JSON {type(doc).__name__}, not an object with one entry per job; "
                         "fix or remove it")
    return doc


def paper_dataset(dataset: str, data_cfg: dict, n_classes: int) -> str | None:
    """The paper's Table 4 column to compare with: cub20, cub200, awa2 or None."""
    if dataset != "auto":
        return None if dataset == "none" else dataset
    name = str(data_cfg.get("dataset", ""))
    if name == "cub":
        return {20: "cub20", 200: "cub200"}.get(n_classes)
    return "awa2" if name in ("awa2", "awa_features") else None
