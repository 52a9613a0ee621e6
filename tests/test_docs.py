"""The README reads in one screen and quotes only figures that a results page backs with its command.

* ``README.md`` is at most `README_MAX_LINES` lines and opens with exactly two commands, ``make
  demo`` and ``make test``; ``.ci/run`` runs the README's test command.
* Every decimal figure and percentage of the README appears on a page of ``docs/results/``; every
  results page is indexed by ``docs/results/README.md`` and opens with the command that
  regenerates it.
* No issue or bug numbers in code, docs, configs or tests: a reader of the repository cannot open
  them, so the reason is written out instead.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
RESULTS = ROOT / "docs" / "results"
README_MAX_LINES = 150
#: Where issue numbers may not appear, and the text files searched there.
NO_ISSUE_NUMBERS = ("ferl", "cbm", "docs", "scripts", "configs", "tests", "datasets", "README.md", "Makefile",
                    ".ci")
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".txt", ".cfg", ""}
#: "issue 18", "issues 14 and 15", "bug 12", "#18"; an upstream project's reference such as
#: "scikit-learn #23134" can be opened, so it is allowed.
ISSUE_NUMBER = re.compile(r"\b(?:issues?|bugs?)[ -]#?\d+"
                          r"|(?<![\w&#])(?<!scikit-learn )(?<!numpy )(?<!torch )(?<!lightning )"
                          r"#\d{1,5}(?!\w)",
                          re.IGNORECASE)
#: A measured figure: a decimal number or a percentage (versions after "Python" are not figures).
FIGURE = re.compile(r"(?<![\w.])(?<!Python )\d+\.\d+(?![\w.]*\d)|(?<![\w.])\d+(?:\.\d+)? ?%")
#: The commands a results page may open with.
COMMAND = re.compile(r"`{1,3}(?:bash\n)?\s*(?:make |python |OMP_NUM_THREADS=\S+ python |train-detector "
                     r"|fit-head |evaluate-\w+ |predict |for S )")


def _readme() -> str:
    return README.read_text(encoding="utf-8")


def test_readme_is_short():
    lines = _readme().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines (at most {README_MAX_LINES})"


def test_readme_opens_with_the_two_commands_and_ci_runs_the_test_one():
    text = _readme()
    first_block = re.search(r"```bash\n(.*?)```", text, re.DOTALL)
    assert first_block is not None
    assert all(line.startswith("# ") for line in text[:first_block.start()].split("\n") if line.strip()), \
        "README.md must open with its title and then the two commands"
    commands = [line.split("#")[0].strip() for line in first_block.group(1).splitlines() if line.strip()]
    assert commands == ["make demo", "make test"]
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line.strip() and not line.lstrip().startswith("#")]
    assert ci[-1] == commands[1], ".ci/run must end with the README's test command"


def test_every_readme_figure_is_on_a_results_page():
    pages = "\n".join(p.read_text(encoding="utf-8") for p in RESULTS.rglob("*.md"))
    missing = sorted({f for f in FIGURE.findall(_readme()) if f not in pages})
    assert not missing, f"figures of README.md on no docs/results page: {missing}"


def test_readme_links_resolve():
    for link in re.findall(r"\]\(([^)#]+)\)", _readme()):
        if "://" not in link:
            assert (ROOT / link).exists(), link


def _pages() -> list[Path]:
    return sorted(p for p in RESULTS.rglob("*.md") if p != RESULTS / "README.md")


def test_results_index_lists_every_page():
    index = (RESULTS / "README.md").read_text(encoding="utf-8")
    linked = {(RESULTS / link).resolve() for link in re.findall(r"\]\(([^)#]+\.md)\)", index)}
    assert len(_pages()) >= 8
    assert [p.relative_to(RESULTS) for p in _pages() if p.resolve() not in linked] == []
    assert all(p.exists() for p in linked)


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(RESULTS)))
def test_results_page_opens_with_its_command(page):
    head = "\n".join(page.read_text(encoding="utf-8").splitlines()[:12])
    assert COMMAND.search(head), f"{page.relative_to(ROOT)} does not open with the command regenerating it"


def _text_files():
    for name in NO_ISSUE_NUMBERS:
        path = ROOT / name
        files = [path] if path.is_file() else sorted(path.rglob("*"))
        for f in files:
            if f.is_file() and f.suffix in TEXT_SUFFIXES and "__pycache__" not in f.parts:
                yield f


def test_no_issue_numbers_in_code_or_docs():
    found = []
    for f in _text_files():
        if f == Path(__file__):
            continue
        for i, line in enumerate(f.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if ISSUE_NUMBER.search(line):
                found.append(f"{f.relative_to(ROOT)}:{i}: {line.strip()[:100]}")
    assert not found, "issue numbers (say the reason instead):\n" + "\n".join(found)


@pytest.mark.parametrize(("text", "hit"), [
    ("see issue 18", True), ("issues 14 and 15", True), ("bug 12:", True), ("fixed in #18", True),
    ("scikit-learn #23134", False), ("(scikit-learn #3995 family)", False), ("see #2313", True),
    ("#: a comment", False), ("the issue's targets", False),
    ("colour #fff", False), ('"#969696"', False), ("&#39;", False),
])
def test_issue_number_rule(text, hit):
    assert bool(ISSUE_NUMBER.search(text)) is hit
