# Two commands on a fresh machine: `make setup`, then `make test`.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup test lint unit integration bench clean

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

test: lint
	$(BIN)/pytest -q -p no:cacheprovider tests

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .pytest_cache
