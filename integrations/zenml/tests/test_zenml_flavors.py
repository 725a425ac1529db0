"""The pooled orchestrator flavors reach a ZenML store both ways: ZenML's own ``zenml orchestrator flavor
register`` (and a component registered on it from the CLI), and this package's ``respools-zenml
register-flavors`` command / :func:`respools_zenml.register_flavors`, which are idempotent."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import respools_zenml
from respools_zenml import cli
from respools_zenml.databricks.orchestrator import PooledDatabricksOrchestrator
from respools_zenml.kubernetes.orchestrator import PooledKubernetesOrchestrator
from respools_zenml.local.orchestrator import PooledLocalOrchestrator
from zenml.client import Client
from zenml.enums import StackComponentType
from zenml.stack.flavor import Flavor
from zenml_test_env import QUIET_ZENML_ENV

BIN = Path(sys.executable).parent


def test_register_flavors_is_idempotent_and_exposes_the_config(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["register-flavors"]) == 0  # what the respools-zenml console script runs
    assert "'respools_local'" in capsys.readouterr().out
    first = respools_zenml.register_flavors()
    second = respools_zenml.register_flavors()
    assert [flavor.id for flavor in first] == [flavor.id for flavor in second]  # type: ignore[attr-defined]
    assert (BIN / "respools-zenml").exists()
    client = Client()
    local = client.get_flavor_by_name_and_type("respools_local", StackComponentType.ORCHESTRATOR)
    kubernetes = client.get_flavor_by_name_and_type("respools_kubernetes", StackComponentType.ORCHESTRATOR)
    databricks = client.get_flavor_by_name_and_type("respools_databricks", StackComponentType.ORCHESTRATOR)
    for flavor in (local, kubernetes, databricks):
        properties = flavor.config_schema["properties"]
        assert {"respools_url", "respools_token", "pool", "priority", "preemptible"} <= set(properties)
    assert "kubernetes_namespace" in kubernetes.config_schema["properties"]
    assert local.source.endswith("PooledLocalOrchestratorFlavor")
    assert Flavor.from_model(local).implementation_class is PooledLocalOrchestrator
    assert Flavor.from_model(kubernetes).implementation_class is PooledKubernetesOrchestrator
    assert {"host", "respools_poll_s", "node_type_id"} <= set(databricks.config_schema["properties"])
    assert Flavor.from_model(databricks).implementation_class is PooledDatabricksOrchestrator


@pytest.mark.slow
def test_zenml_cli_registers_the_flavor_and_a_pooled_orchestrator(tmp_path: Path) -> None:
    env = {**os.environ, **QUIET_ZENML_ENV, "ZENML_CONFIG_PATH": str(tmp_path / "zenml")}

    def run(*argv: str) -> str:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout + done.stderr

    zenml = str(BIN / "zenml")
    run(zenml, "orchestrator", "flavor", "register", "respools_zenml.flavors.PooledLocalOrchestratorFlavor")
    registered = run(
        zenml,
        "orchestrator",
        "register",
        "pooled",
        "--flavor=respools_local",
        "--respools_url=http://127.0.0.1:8000",
        "--pool=a100",
        "--priority=5",
    )
    assert "Successfully registered orchestrator `pooled`" in registered
