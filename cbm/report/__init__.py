"""Reports of a finished run: ``report.md`` with tables, plots and example explanations.

Owns the run reader (`load_run`, `RunView`), the report builder (`build_report`, ``python -m
cbm.report``), its figures (`cbm.report.plots`) and the example explanations
(`cbm.report.examples`).
"""

from cbm.report.build import build_report, report_main
from cbm.report.run import RunView, load_run

__all__ = ["RunView", "build_report", "load_run", "report_main"]
