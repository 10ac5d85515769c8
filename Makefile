# Everything from nothing: each target creates .venv and installs what it needs.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: run test bench lint typecheck clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip

$(VENV)/.installed-base: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -e '.[dev,spark]'
	touch $@ $(VENV)/.installed-base

# The main job on the embedded default: a demo bucket, served on 127.0.0.1:8080.
run: $(VENV)/.installed-base
	$(BIN)/tiered-gateway demo

test: $(VENV)/.installed-dev
	$(BIN)/ruff check gateway indexcache tests
	$(BIN)/ruff format --check gateway indexcache tests
	$(BIN)/mypy
	$(BIN)/lint-imports --no-logo
	$(BIN)/pytest

bench: $(VENV)/.installed-dev
	$(BIN)/python -m tests.bench.bench_decode
	$(BIN)/python -m tests.bench.bench_remote
	$(BIN)/python -m tests.bench.bench_indexcache
	$(BIN)/python -m tests.bench.bench_s3
	$(BIN)/python -m tests.bench.bench_metadata
	$(BIN)/python -m tests.bench.bench_spark

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check gateway indexcache tests
	$(BIN)/mypy

clean:
	rm -rf $(VENV) build .pytest_cache .mypy_cache .ruff_cache
