"""The package layout: each stage imports only from the stages above it in the data flow."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import cbm

CBM = Path(cbm.__file__).resolve().parent
#: The stages in data-flow order (`cbm`'s module map), after the plumbing every console script shares.
STAGES = ("jobs", "runtime", "data", "detector", "concepts", "heads", "openworld", "interventions",
          "shift", "report", "predict", "demo")


def _stage(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "cbm" else None


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names if node.module == "cbm")
    return found


MODULES = sorted(p for p in CBM.rglob("*.py") if p.name != "__init__.py" or p.parent != CBM)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(CBM)))
def test_no_import_runs_back_up_the_flow(path):
    rel = path.relative_to(CBM)
    own = rel.parts[0] if len(rel.parts) > 1 else rel.stem
    assert own in STAGES, f"{rel} lies outside the stages {STAGES}"
    back = sorted(m for m in _imports(path)
                  if _stage(m) in STAGES and STAGES.index(_stage(m)) > STAGES.index(own))
    assert not back, f"{rel} (stage {own!r}) imports later stages: {back}"


def test_every_stage_is_a_documented_package_with_all():
    for stage in STAGES[:-1]:
        init = CBM / stage / "__init__.py"
        tree = ast.parse(init.read_text())
        assert ast.get_docstring(tree), f"cbm.{stage} has no docstring"
        names = [t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
                 if isinstance(t, ast.Name)]
        assert "__all__" in names, f"cbm.{stage} lists no __all__"


def test_no_module_over_400_lines():
    long = {str(p.relative_to(CBM)): n for p in CBM.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 400}
    assert not long, f"modules over 400 lines: {long}"
