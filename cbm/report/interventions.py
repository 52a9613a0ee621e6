"""The run report's section on concept interventions, from ``<run>/interventions/`` (written by
``evaluate-interventions``, :mod:`cbm.interventions`): its accuracy table and curves, embedded."""

from __future__ import annotations

from pathlib import Path

__all__ = ["interventions_section"]


def interventions_section(run_dir: Path) -> list[str]:
    """Markdown lines: the test-accuracy table of ``interventions/interventions.md`` and its figure,
    or a line saying how to produce them."""
    folder = run_dir / "interventions"
    report = folder / "interventions.md"
    if not report.is_file():
        return ["## Concept interventions", "", "Not run for this report (`evaluate-interventions --run "
                f"{run_dir}`).", ""]
    text = report.read_text()
    intro, _, rest = text.partition("\n## ")
    accuracy = ("### " + rest).split("\n## ")[0] if rest else ""  # its first section, one level down
    return ["## Concept interventions", "", *intro.split("\n", 1)[1].strip().split("\n"), "",
            *accuracy.split("\n"), "",
            "Credal sets, held-out classes and every k: [interventions/interventions.md]"
            "(interventions/interventions.md); curves of every point: `interventions/curves.csv`.", "",
            "![intervention curves](interventions/interventions.png)", ""]
