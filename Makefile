# Two entry points: `make demo` (the main job on the embedded default) and `make test`.
# Both create .venv and install the project on first use; later runs reuse it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint notebook clean-venv

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python scripts/demo.py $(DEMO_ARGS)

# Two test processes: the suite's time budget is for a 2-core machine.
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -n 2

lint: $(STAMP)
	$(BIN)/ruff check .

# JupyterLab (the `notebook` extra) for notebooks/inspect_rules.ipynb; `make demo` first makes runs/demo.
$(VENV)/.notebook: $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[dev,notebook]"
	touch $(VENV)/.notebook

notebook: $(VENV)/.notebook
	$(BIN)/jupyter lab notebooks/inspect_rules.ipynb

clean-venv:
	rm -rf $(VENV)
