"""Docstrings explain, results live in ``docs/results/``: no measured figures in ferl/ and cbm/.

Scans the docstrings and comments of every ``.py`` file in ``ferl/`` and ``cbm/`` except
``ferl/benchmarks/`` (whose job is to measure) and counts the *measured figures* in them; at most
`MAX_FIGURES` may stay. A figure in a docstring goes stale the day the code changes and nobody
re-measures it; a page of ``docs/results/`` says when and by which command it was measured. A
docstring says what a function does, its shapes, errors, the paper's equation or "beyond the paper"
and why, and names the script that measures it; the figures and their history go to
``docs/results/*.md``, each table with the command that regenerates it.

What is scanned: every string statement (module, class, function and attribute docstrings) and
every comment; a paragraph is a docstring's block between blank lines or a run of comment lines.
Doctest examples (a ``>>>`` line up to the next blank line) are code, not prose, and are skipped.
Before counting, spans in ``double backticks`` and single backticks (code: ``ccp_alpha=0.005``,
``RIDGE = 1e-3``, `RELIABILITY_QUANTILES`) and in straight double quotes (quoted rule or paper text)
are dropped.

What counts, one per number:

* a percentage with a decimal point: ``83.3 %``, ``5.5%``;
* a ratio: a number written against ``x`` or ``×`` (``2.5x``, ``33x``), or ``x1.6``;
* a time or a size: a number, a space and ms, µs, s, min, MB, GB, MiB or GiB (``32 ms``, ``1.7 GB``);
* a decimal number of at least 1 (``89.5``, ``4.6``, ``1.495``), the way scores on the 0-100
  scale, nats, seconds and set sizes are quoted;
* a decimal number below 1 within three words of a metric's name (AUROC, AUPR, FPR95, AURC, ECE,
  accuracy, coverage, u65, u80): ``train AUROC 0.976``, ``0.762 AUROC``;

and one per *measured paragraph*: a paragraph that says "measured" (or "measuring",
"measurement") and quotes at least one of the figures above.

What does not count (parameters, constants, equations, shapes, references): decimals below 1 away
from metric names (``0.95 quantile``, ``(0.9, 0.96)``, ``delta = 0.05``); scientific notation
(``1e-9``); integers and integer percentages (``95 % of the val images`` and ``20 %`` splits are
settings); numbers after section, eq., appendix, table, figure, algorithm, issue, version, §,
``default``, ``=`` or a library's name (``section 4.2``, ``eq. 12``, ``default=2.0``, ``Lightning
2.6``, ``Apache-2.0``); dotted versions (``2.14.1``); a fraction after "at" or "threshold"
(``accuracy at 0.5``); spaced products (``3 seeds x 5 folds``, ``50 x 85``) and sizes (``64x64``).
The rule undercounts integer results (``26 %``, ``717 rules``); it is a budget, not a proof.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Packages scanned, and the folders inside them that may quote figures.
PACKAGES = ("ferl", "cbm")
EXEMPT = (ROOT / "ferl" / "benchmarks",)
#: Measured figures allowed in ferl/ and cbm/ outside benchmarks/: none (docs/results/README.md).
MAX_FIGURES = 0

_CODE = re.compile(r"``.*?``|`[^`\n]*`|\"[^\"]*\"", re.DOTALL)
_NUMBER = re.compile(r"(?<![\w.])(?<![A-Za-z]-)(\d+\.\d+)(?!\w|\.\d)")
_PERCENT = re.compile(r"(?<![\w.])\d+\.\d+\s?%")
_UNIT = re.compile(r"(?<![\w.^])\d+(?:\.\d+)?\s(?:ms|µs|s|min|GB|MB|GiB|MiB)\b")
_RATIO = re.compile(r"(?<![\w.])\d+(?:\.\d+)?[x×](?!\w|\s?\d)|(?<![\w.])[x×]\d+\.\d+(?!\w|\.\d)")
_REFERENCE = re.compile(r"(?:§|\b(?:section|sections|eq\.?|eqs\.?|equation|appendix|table|tables|figure"
                        r"|fig\.?|algorithm|issue|issues|version|v|default|python|pytorch|torch|lightning|numpy"
                        r"|numba|pandas|timm|cuda))\s*$|=\s*$", re.IGNORECASE)
_THRESHOLD = re.compile(r"(?:\bat|threshold)\s*$", re.IGNORECASE)
_METRIC = re.compile(r"\b(?:AUROC|AUPR(?:-Out)?|FPR95|AURC|ECE|accuracy|coverage|u65|u80)\b", re.IGNORECASE)
_MEASURED = re.compile(r"\bmeasur(?:ed|ing|ement)\b", re.IGNORECASE)
#: A doctest example: a ``>>>`` line and the lines after it up to a blank line (continuations, output).
_DOCTEST = re.compile(r"^[ \t]*>>>.*(?:\n(?![ \t]*$).*)*", re.MULTILINE)


def figures(paragraph: str) -> list[str]:
    """The measured figures of one paragraph, in order (rules in the module docstring)."""
    text = _CODE.sub(lambda m: " " * len(m.group()), paragraph)
    found: dict[int, str] = {}
    for pattern in (_PERCENT, _RATIO, _UNIT):
        for m in pattern.finditer(text):
            found[m.start()] = m.group().strip()
    for m in _NUMBER.finditer(text):
        if any(start <= m.start() < start + len(fig) for start, fig in found.items()):
            continue
        before = text[:m.start()]
        if _REFERENCE.search(before):
            continue
        if float(m.group(1)) >= 1:
            found[m.start()] = m.group(1)
            continue
        words_before = " ".join(before.split()[-3:])
        words_after = " ".join(text[m.end():].split()[:3])
        if not _THRESHOLD.search(before) and (_METRIC.search(words_before) or _METRIC.search(words_after)):
            found[m.start()] = m.group(1)
    out = [found[k] for k in sorted(found)]
    if out and _MEASURED.search(text):
        out.append("<measured paragraph>")
    return out


def _paragraphs(path: Path) -> list[tuple[int, str]]:
    """``(line, paragraph)`` of every docstring and comment block of ``path``."""
    source = path.read_text(encoding="utf-8")
    out = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)):
            text = _DOCTEST.sub(lambda m: "\n" * m.group().count("\n"), node.value.value)
            for block in re.finditer(r"\S.*?(?=\n\s*\n|\Z)", text, re.DOTALL):
                out.append((node.lineno + text.count("\n", 0, block.start()), block.group()))
    run: list[str] = []
    start = last = -1
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type != tokenize.COMMENT:
            continue
        row = tok.start[0]
        if run and row != last + 1:
            out.append((start, " ".join(run)))
            run = []
        if not run:
            start = row
        run.append(tok.string.lstrip("#:").strip())
        last = row
    if run:
        out.append((start, " ".join(run)))
    return out


def _sources() -> list[Path]:
    paths = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if not any(path.is_relative_to(folder) for folder in EXEMPT):
                paths.append(path)
    return paths


@pytest.mark.parametrize(("text", "expected"), [
    ("held-out abstention 40.5 / 44.1 %", ["40.5", "44.1 %"]),
    ("one pass takes 8.7x and predict alone 1.8x; median 33x", ["8.7x", "1.8x", "33x"]),
    ("from x1.6 to 2.5×", ["x1.6", "2.5×"]),
    ("ignorance AUROC 58.4 against 92.1", ["58.4", "92.1"]),
    ("train AUROC 0.976 vs test 0.977; 0.762 AUROC on 10 sets", ["0.976", "0.977", "0.762"]),
    ("Measured on the synthetic world: 89.5 -> 89.9.", ["89.5", "89.9", "<measured paragraph>"]),
    ("Measured with scripts/bench_scale.py; figures in docs/results/speed.md", []),
    ("the 0.95 quantile, ridge 1e-9, tau at (0.9, 0.96), delta = 0.05", []),
    ("paper eq. 12 and section 4.2, appendix A.2, Python 3.11, PyTorch 2.14.1", []),
    ("3 seeds x 5 folds, a 50 x 85 matrix, 64x64 images, shape (n, 3)", []),
    ("accepts 95 % of the val images; a 20 % split", []),
    ("routing took 32 ms, the fit 2 s; checkpoints keep 1.7 GB; a column of 1s", ["32 ms", "2 s", "1.7 GB"]),
    ("width_factor : float > 0, default=2.0; margin (paper default 1.0)", []),
    ("Apache-2.0 licence; Lightning 2.6 writes last.ckpt; accuracy at 0.5", []),
    ("rev 1.5 of the dev 1.6 loader", ["1.5", "1.6"]),
    ("``ccp_alpha=0.005`` and ``max_width=1.5``; the rule \"x9 > 3.44 +- 0.59\"", []),
])
def test_figure_rule(text, expected):
    assert figures(text) == expected


def test_doctest_examples_are_not_prose(tmp_path):
    path = tmp_path / "m.py"
    path.write_text('"""Module.\n\n>>> f(2.5)\n3.5\n\nTook 2.5 s.\n"""\n')
    assert [(line, figures(text)) for line, text in _paragraphs(path) if figures(text)] == [(6, ["2.5 s"])]


def test_docstrings_keep_figures_in_docs_results():
    """At most `MAX_FIGURES` measured figures in ferl/ and cbm/ outside benchmarks/."""
    sources = _sources()
    assert len(sources) > 100, "the scan found too few modules: is ROOT right?"
    found = [f"{path.relative_to(ROOT)}:{line}: {fig}"
             for path in sources for line, paragraph in _paragraphs(path) for fig in figures(paragraph)]
    assert len(found) <= MAX_FIGURES, (
        f"{len(found)} measured figures in docstrings and comments (at most {MAX_FIGURES}); move them "
        "to docs/results/*.md with the command that regenerates them and leave the reason and a "
        "pointer in the docstring:\n" + "\n".join(found))
