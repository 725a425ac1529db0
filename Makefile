# The two commands the README promises: `make demo` and `make test`. Both build .venv on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INTEGRATIONS := $(patsubst %/pyproject.toml,%,$(wildcard integrations/*/pyproject.toml))
STAMP := $(VENV)/.installed

.PHONY: test lint typecheck unit demo bench install clean api-docs

$(STAMP): pyproject.toml constraints.txt scripts/install_helm.py $(wildcard integrations/*/pyproject.toml)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip uv
	$(BIN)/uv pip install -q --python $(BIN)/python -c constraints.txt -e '.[server,nvml,report,dev]' $(foreach i,$(INTEGRATIONS),-e '$(i)[test]')
	@# helm for the chart's tests (server/helm/respools); without it those tests skip with the reason.
	$(BIN)/python scripts/install_helm.py || echo "helm not installed: the helm lint/template tests will skip"
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check src tests integrations benchmarks examples scripts
	$(BIN)/ruff format --check src tests integrations benchmarks examples scripts

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest $(PYTEST_ARGS)

test: lint typecheck unit

demo: $(STAMP)
	$(BIN)/python examples/demo.py

# docs/api.md from the service's OpenAPI document (the test suite fails when it is stale).
api-docs: $(STAMP)
	$(BIN)/python scripts/api_docs.py

bench: $(STAMP)
	$(BIN)/python benchmarks/scheduling.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
