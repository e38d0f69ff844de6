# EMQ: `make test` and `make demo` set everything up on a fresh Debian/Ubuntu machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install os-deps test demo lint typecheck clean screenshots
DEMO_ARGS ?= --duration 60

install: os-deps $(STAMP)

os-deps:
	@bash deploy/install-deps.sh

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,spark]'
	@touch $@

test: install
	$(VENV)/bin/ruff check .
	$(PY) -m pytest $(PYTEST_ARGS)

demo: install
	$(VENV)/bin/emq demo $(DEMO_ARGS)

# The console's pictures in the README: its browser tests, saving each view.
screenshots: install
	EMQ_CONSOLE_SCREENSHOTS=docs/screenshots $(PY) -m pytest -q tests/console

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

typecheck: install
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
