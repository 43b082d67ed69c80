# Two commands on a fresh machine: `make setup`, then `make test`.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup test lint unit integration docs bench clean

setup:
	bash scripts/setup.sh

lint:
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy

unit:
	$(BIN)/pytest -q tests/unit

integration:
	$(BIN)/pytest -q tests/integration

# The documentation site (MkDocs): broken links and missing pages fail the build.
docs:
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet -d build/site

test: lint docs
	$(BIN)/pytest -q -p no:cacheprovider -n 2 --dist loadscope --durations=30 tests

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .pytest_cache
