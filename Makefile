# The two commands the README promises: `make demo` and `make test`. Both build .venv on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INTEGRATIONS := $(patsubst %/pyproject.toml,%,$(wildcard integrations/*/pyproject.toml))
STAMP := $(VENV)/.installed

.PHONY: test lint typecheck unit zenml-compat demo bench install clean api-docs

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

test: lint typecheck unit zenml-compat

# The ZenML integration against the other ZenML minor it supports (docs/zenml.md): .venv has the newest
# (constraints.txt), this venv the one before with every other pin the same. A subset, kept to a few
# minutes: a real pipeline on respools_local (preempted, checkpointed, retried) and one through
# respools_vertex (the flavor that inherits most of ZenML's code: ZenML's Vertex step operator), all of
# respools_kubernetes (with the checks of what it assumes of ZenML's orchestrator pod), and the
# ResourceSettings mapping. respools_step_operator uses only the documented step-operator verbs.
ZENML_COMPAT := 0.97.0
ZENML_COMPAT_VENV := .venv-zenml-$(ZENML_COMPAT)
ZENML_TESTS := integrations/zenml/tests
ZENML_COMPAT_TESTS := $(ZENML_TESTS)/test_zenml_kubernetes.py $(ZENML_TESTS)/test_zenml_kubernetes_controller.py \
	$(ZENML_TESTS)/test_zenml_kubernetes_contract.py $(ZENML_TESTS)/test_zenml_demand.py \
	$(ZENML_TESTS)/test_zenml_pipelines.py::test_lower_priority_pipeline_is_preempted_checkpoints_and_resumes_after_retry \
	'$(ZENML_TESTS)/test_zenml_step_operators.py::test_pooled_vertex_step_is_preempted_cancelled_retried_and_finishes[vertex]'

$(ZENML_COMPAT_VENV)/.installed: $(STAMP)
	test -x $(ZENML_COMPAT_VENV)/bin/python || $(PYTHON) -m venv $(ZENML_COMPAT_VENV)
	grep -v '^zenml==' constraints.txt > $(ZENML_COMPAT_VENV)/constraints.txt
	echo 'zenml==$(ZENML_COMPAT)' >> $(ZENML_COMPAT_VENV)/constraints.txt
	$(BIN)/uv pip install -q --python $(ZENML_COMPAT_VENV)/bin/python -c $(ZENML_COMPAT_VENV)/constraints.txt \
		-e '.[server]' -e integrations/kubernetes -e integrations/vertex -e integrations/databricks -e 'integrations/zenml[test]'
	touch $@

zenml-compat: $(ZENML_COMPAT_VENV)/.installed
	$(ZENML_COMPAT_VENV)/bin/python -c 'import zenml; assert zenml.__version__ == "$(ZENML_COMPAT)", zenml.__version__'
	$(ZENML_COMPAT_VENV)/bin/pytest -p no:cacheprovider $(ZENML_COMPAT_ARGS) $(ZENML_COMPAT_TESTS)

demo: $(STAMP)
	$(BIN)/python examples/demo.py

# docs/api.md from the service's OpenAPI document (the test suite fails when it is stale).
api-docs: $(STAMP)
	$(BIN)/python scripts/api_docs.py

bench: $(STAMP)
	$(BIN)/python benchmarks/scheduling.py

clean:
	rm -rf $(VENV) .venv-zenml-* .mypy_cache .ruff_cache .pytest_cache
