"""The `ferl` package layout: rooms by stage, each importing only from the rooms below it.

A module may import from its own room and from lower floors, never from a floor above. The floors,
bottom up: the parameter check and the metrics (no other FERL import); the tree; the evidence
algebra and the presets; the novelty scores and the rules; the read-out and the explanations; the
model files and the estimator's mixins; the estimator; the benchmarks.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import ferl

FERL = Path(ferl.__file__).resolve().parent
#: Room (subpackage) or top-level module -> floor. Imports run from a higher floor to a lower or equal one.
FLOOR = {
    "_params": 0, "metrics": 0, "_inputs": 0,
    "tree": 1,
    "evidence": 2, "presets": 2,
    "novelty": 3, "rules": 3,
    "readout": 4, "explain": 4, "_rules_mixin": 4,
    "io": 5,
    "estimator": 6,
    "benchmarks": 7,
}
ROOMS = {"tree", "evidence", "novelty", "readout", "io", "metrics", "benchmarks"}


def _room(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "ferl" else None


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            if node.module == "ferl":
                found.update(f"ferl.{alias.name}" for alias in node.names)
    return found


MODULES = sorted(p for p in FERL.rglob("*.py") if p != FERL / "__init__.py")


def _own(path: Path) -> str:
    rel = path.relative_to(FERL)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(FERL)))
def test_no_import_runs_up_a_floor(path):
    own = _own(path)
    assert own in FLOOR, f"{path.relative_to(FERL)} lies in no known room or floor"
    up = sorted(m for m in _imports(path)
                if (r := _room(m)) in FLOOR and r != own and FLOOR[r] > FLOOR[own])
    assert not up, f"{path.relative_to(FERL)} (floor {FLOOR[own]}) imports higher floors: {up}"


def test_rooms_have_docstrings_and_at_most_eight_top_level_modules():
    top = sorted(p.stem for p in FERL.glob("*.py") if p.name != "__init__.py")
    assert len(top) <= 8, f"{len(top)} top-level modules: {top}"
    rooms = sorted(p.name for p in FERL.iterdir() if (p / "__init__.py").is_file())
    assert set(rooms) == ROOMS
    for room in rooms:
        assert ast.get_docstring(ast.parse((FERL / room / "__init__.py").read_text())), f"ferl.{room}"


def test_no_module_over_400_lines():
    long = {str(p.relative_to(FERL)): n for p in FERL.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 400}
    assert not long, f"modules over 400 lines: {long}"
