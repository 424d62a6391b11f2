# The two entry points of the README: `make demo` and `make test`.
# Each sets up everything it needs on a fresh machine (Java, a virtualenv, the package).

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-unit unit-tier check lint imports typecheck setup clean check-deps check-core py-files

# The demo runs the example DAGs with `airflow dags test` on the embedded default:
# Airflow on SQLite in .demo/airflow, tables in .demo/lake, and the Spark stages over a local
# Spark Connect server (local[*] on 127.0.0.1:15002) that the demo starts and stops; it stops before any
# DAG when another process holds the port (another port: "port": N in SPARK_CONN).
# For the spark-submit path instead: make demo SPARK_CONN='{"conn_type": "spark", "host": "local[*]"}'.
SPARK_CONN ?= {"conn_type": "spark_connect", "host": "sc://127.0.0.1", "port": 15002}
DEMO_ENV = PATH="$(CURDIR)/$(VENV)/bin:$$PATH" \
	AIRFLOW_HOME="$(CURDIR)/.demo/airflow" \
	AIRFLOW__CORE__DAGS_FOLDER="$(CURDIR)/dags_examples" \
	AIRFLOW__CORE__LOAD_EXAMPLES=False \
	AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION=False \
	AIRFLOW_CONN_LANCE_DEFAULT='{"conn_type": "lance", "host": "$(CURDIR)/.demo/lake"}' \
	AIRFLOW_CONN_SPARK_DEFAULT='$(SPARK_CONN)'

demo: $(STAMP)
	rm -rf .demo && mkdir -p .demo/airflow
	$(DEMO_ENV) airflow db migrate > .demo/db-migrate.log 2>&1
	$(DEMO_ENV) $(PY) -m geneva_provider.demo dags

# The suite in tiers (tests/README.md): tests/unit (no JVM, no Airflow DB), tests/spark, tests/airflow
# (dag.test() over one Spark Connect server), tests/system (scheduler, cluster, faults, programs, docs).
# `make test` runs them all: the unit tier first, in this process alone (it proves that no JVM starts, which
# a process that has run a Spark test could not), then the other three on TEST_WORKERS pytest-xdist
# workers, a test file at a time per worker (module fixtures -- an Airflow deployment, a standalone
# cluster -- stay in one process), the slowest tier first.  Three workers on two cores: much of a test's
# time is waiting (servers that start, stages that retry a lost server, a scheduler that polls, JVMs that
# start), which a third worker fills (two left ~13 % of the CPU idle; three leave ~3 %, in ~10 % less time).
# `make test-unit` runs the unit tier alone, in well under two minutes (its conftest fails the run if a
# JVM starts or the Airflow DB is touched).  PYTEST_ARGS adds options to both runs, e.g.
# PYTEST_ARGS=--durations=30 (CI) or PYTEST_ARGS='-k backfill'; TEST_WORKERS=0 runs them in this process.
# (Exit status 5, "no tests ran", of one run is not a failure: a -k may select tests of one run only.)
PYTEST = PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pytest
PYTEST_ARGS ?=
TEST_WORKERS ?= 3

# Spark's classes in a class-data-sharing archive that the suite's JVMs map (tests/class_archive.py: they
# start in about half the CPU), built once per virtualenv.
CLASS_ARCHIVE := $(VENV)/spark-classes.jsa

$(CLASS_ARCHIVE): $(STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m tests.class_archive $@

# The unit tier starts no JVM, so it runs while the archive is built (each keeps about one core busy).
test: $(STAMP)
	$(MAKE) --no-print-directory -j2 unit-tier $(CLASS_ARCHIVE)
	$(PYTEST) -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder tests/system tests/airflow tests/spark $(PYTEST_ARGS) || [ $$? -eq 5 ]

test-unit: $(STAMP)
	$(PYTEST) tests/unit $(PYTEST_ARGS)

unit-tier: $(STAMP)
	$(PYTEST) tests/unit $(PYTEST_ARGS) || [ $$? -eq 5 ]

# The static checks, out of pytest: ruff, the import contracts, the types, the declared dependencies.
check: lint imports typecheck check-deps

lint: $(STAMP)
	$(VENV)/bin/ruff check .

# The layers' arrows ([tool.importlinter] in pyproject.toml); tests/unit/test_layers.py proves they bite.
imports: $(STAMP)
	$(VENV)/bin/lint-imports --no-cache

# mypy over the core and the pipeline; what it checks and how strictly is [tool.mypy] in pyproject.toml.
typecheck: $(STAMP)
	$(VENV)/bin/mypy

# Every import the package makes is declared (deptry; configured in pyproject.toml). Twice: the whole
# package against the base dependencies + the `airflow` extra, then the core alone (all but the
# Airflow surface) against the base dependencies only -- what installing the package without extras brings.
AIRFLOW_SURFACE := geneva_provider/(hooks|operators|sensors|triggers)/|geneva_provider/(task_groups|assets|openlineage|plugin)\.py
check-deps: $(STAMP)
	@echo "check-deps: deptry, the whole package (base dependencies + the airflow extra)"
	$(VENV)/bin/deptry --no-ansi .
	@echo "check-deps: deptry, the core without the Airflow surface (base dependencies only)"
	$(VENV)/bin/deptry --no-ansi . --extend-exclude 'benchmarks|dags_examples|build|docs|$(AIRFLOW_SURFACE)' \
	  --optional-dependencies-dev-groups airflow,dev,screenshots
	@echo "check-deps: OK, every import is declared"

# The package installed without extras, in a fresh venv in a temp dir (from a copy of the
# sources, so no build/ is left here), then a backfill, a view refresh and a compaction on local Spark.
check-core: $(STAMP)
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	  mkdir "$$tmp/src"; cp -r pyproject.toml README.md constraints.txt geneva_provider spark_apps "$$tmp/src"; \
	  echo "check-core: a fresh venv in $$tmp/venv: pip install -c constraints.txt . (no extras)"; \
	  $(PYTHON) -m venv "$$tmp/venv"; \
	  "$$tmp/venv/bin/python" -m pip install -q -c constraints.txt "$$tmp/src"; \
	  "$$tmp/venv/bin/python" -m pip list --format=freeze | sed 's/^/check-core:   installed /'; \
	  cd "$$tmp" && "$$tmp/venv/bin/python" "$(CURDIR)/.ci/check_core.py"

# dist/geneva_provider.zip: this package, pure Python, for the `py_files` of executors whose Python lacks it
# (docs/deploying.md) -- the very zip the Spark stages ship themselves (spark_apps/package.py), kept where a
# cluster can be given it; built without importing Airflow, so nothing is written under $HOME. The wheel is
# `python -m build`.
py-files: $(STAMP)
	mkdir -p dist
	$(PY) -m geneva_provider.spark_apps.package dist/geneva_provider.zip > /dev/null
	@echo "py-files: dist/geneva_provider.zip"

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@command -v java >/dev/null 2>&1 || { \
	  echo "Java not found: installing a headless JRE (Spark needs Java 17+)"; \
	  apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e ".[airflow,connect,dev]"
	touch $(STAMP)

clean:
	rm -rf $(VENV) .demo .pytest_cache
