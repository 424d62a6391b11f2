# The two entry points of the README: `make demo` and `make test`.
# Each sets up everything it needs on a fresh machine (Java, a virtualenv, the package).

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint setup clean

# The demo runs the example DAGs with `airflow dags test` on the embedded default:
# Airflow on SQLite in .demo/airflow, tables in .demo/lake, and the Spark stages over a local
# Spark Connect server (local[*] on 127.0.0.1:15002) that the demo starts and stops.
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

test: $(STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check .

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@command -v java >/dev/null 2>&1 || { \
	  echo "Java not found: installing a headless JRE (Spark needs Java 17+)"; \
	  apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e ".[airflow,dev]"
	touch $(STAMP)

clean:
	rm -rf $(VENV) .demo .pytest_cache
