"""The package sources use scikit-learn's public API only (the team's guide): no import of a private
module or name, and no call of `BaseEstimator`'s private methods (``_validate_params``...)."""

import ast
import re
from pathlib import Path

import pytest
from sklearn.base import BaseEstimator, ClassifierMixin

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("ferl", "cbm", "scripts")
PRIVATE_METHODS = sorted({n for cls in (BaseEstimator, ClassifierMixin) for n in vars(cls)
                          if n.startswith("_") and not n.endswith("__")})


def private_sklearn_uses(text: str) -> list[str]:
    """Each private scikit-learn import, dotted reference or base-class private method in ``text``."""
    imported = []  # (module, name) of every scikit-learn import
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            imported += [(alias.name, "") for alias in node.names]
    found = [f"{module} {name}".strip() for module, name in imported if module.split(".")[0] == "sklearn"
             and any(p.startswith("_") for p in [*module.split("."), name])]
    found += re.findall(r"\bsklearn(?:\.\w+)*\._\w+", text)
    found += [f".{name}" for name in PRIVATE_METHODS if re.search(rf"\.{name}\b", text)]
    return found


@pytest.mark.parametrize("snippet", [
    "from sklearn.utils._param_validation import Interval",
    "from sklearn.base import BaseEstimator, _fit_context",
    "import sklearn.utils._param_validation as pv",
    "x = sklearn.utils.validation._check_sample_weight(w, X)",
    "est._validate_params()",
])
def test_the_check_finds_private_uses(snippet):
    assert private_sklearn_uses(snippet)


def test_the_check_passes_public_uses():
    text = ("from sklearn.base import BaseEstimator, ClassifierMixin\n"
            "from sklearn.utils.validation import check_is_fitted, validate_data\n"
            "import sklearn.metrics\nself._check_X(X)\n")
    assert private_sklearn_uses(text) == []


def test_package_sources_use_no_private_sklearn_api():
    files = [p for d in SOURCES for p in sorted((ROOT / d).rglob("*.py"))]
    assert len(files) > 50
    bad = {str(p.relative_to(ROOT)): uses for p in files if (uses := private_sklearn_uses(p.read_text()))}
    assert bad == {}
