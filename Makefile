# The two commands a newcomer needs: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DATA_DIR ?= .danlu
PORT ?= 8000

.PHONY: run test lint typecheck bench clean system-deps

# The sandbox's Debian packages (bubblewrap, slirp4netns, nftables …), where missing and installable.
system-deps:
	@tools/install-system-deps.sh

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

run: $(STAMP) system-deps
	$(BIN)/danlu server --data-dir $(DATA_DIR) --port $(PORT)

test: $(STAMP) system-deps
	$(BIN)/ruff check src tests benchmarks tools
	$(BIN)/mypy
	$(BIN)/pytest -q

bench: $(STAMP) system-deps
	$(BIN)/python benchmarks/api_latency.py
	$(BIN)/python benchmarks/metering.py
	$(BIN)/python benchmarks/sandbox_startup.py
	$(BIN)/python benchmarks/sandbox_many.py

clean:
	rm -rf $(VENV) $(DATA_DIR) .pytest_cache .mypy_cache .ruff_cache
