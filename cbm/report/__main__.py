"""``python -m cbm.report RUN_DIR [...]``: write ``report.md`` for a finished run."""

from cbm.report.build import report_main

report_main()
