# The two entry points of the README: `make demo` and `make test`.
# Each sets up everything it needs on a fresh machine (Java, a virtualenv, the package).

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint setup clean

demo: $(STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m geneva_provider.demo

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
