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

# --no-compile: pip would byte-compile every installed module (all of pyspark's), a third of the
# install's time; Python compiles and caches what is imported on first use instead.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --no-compile -e '.[dev,spark]'
	@touch $@

# The suite runs in two passes, both always. First every test not marked `serial`, on
# $(PYTEST_WORKERS) xdist workers (most tests wait on servers, sinks and subprocesses, so 3 keep
# 2 cores busy); --dist loadfile keeps each file on one worker, so a module fixture (the Spark
# tests' histories) is built once. Then the `serial` tests (they judge timing: quota per second,
# latency, recovery time, Hypothesis deadlines, benchmarks) alone, with the machine quiet again.
# `make test` fails if either pass fails; a pass that selects nothing (exit 5, e.g. PYTEST_ARGS
# naming one file) is no failure unless both select nothing. Each pass prints its 15 slowest
# tests: the suite must stay well under 15 minutes, and that list says where the time goes.
PYTEST_WORKERS ?= 3
# Bytecode caches are written even where the caller's environment says not to: otherwise every
# process of the suite (4 pytest processes, hundreds of `emq` ones) compiles each of our modules it
# imports from source, and each pytest process rewrites every test module's asserts again.
unexport PYTHONDONTWRITEBYTECODE

test: install
	$(VENV)/bin/ruff check .
	@parallel=0; serial=0; \
	echo "pytest, parallel pass: -n $(PYTEST_WORKERS) -m 'not serial'"; \
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile -m "not serial" --durations=15 $(PYTEST_ARGS) \
		|| parallel=$$?; \
	echo "pytest, serial pass: -m serial"; \
	$(PY) -m pytest -p no:xdist -m serial --durations=15 $(PYTEST_ARGS) || serial=$$?; \
	if [ $$parallel = 5 ] && [ $$serial = 5 ]; then echo "make test: no test selected"; exit 5; fi; \
	[ $$parallel = 5 ] && parallel=0; [ $$serial = 5 ] && serial=0; \
	[ $$parallel = 0 ] && [ $$serial = 0 ] \
		|| { echo "make test: parallel pass exit $$parallel, serial pass exit $$serial"; exit 1; }

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
