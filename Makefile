PY ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
CT := $(BIN)/clustertwin

.PHONY: demo test lint bench docs-check venv dev-venv clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

venv: $(BIN)/python
	$(BIN)/pip install -q -e .

dev-venv: $(BIN)/python
	$(BIN)/pip install -q -e '.[dev,report,sweep,ray,bench,web,profile]'

demo: venv
	$(CT) plan

lint: dev-venv
	$(BIN)/ruff check src tests benchmarks tools

test: dev-venv
	$(BIN)/ruff check src tests benchmarks tools
	$(BIN)/pytest -q -n 2

docs-check: dev-venv
	$(BIN)/python tools/check_doc_examples.py -j 2

bench: dev-venv
	$(BIN)/pytest -q benchmarks --benchmark-only -p no:xdist

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .ruff_cache
