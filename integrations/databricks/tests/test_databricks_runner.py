"""A lease's life as a one-time Databricks run: the shared runner loop (respools.client.jobs) with the
Databricks runner, through the real WorkspaceClient against the fake Jobs runs API, holding leases from a
real respools service."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
from databricks.sdk import WorkspaceClient
from databricks.sdk.config import Config
from fake_databricks import FakeDatabricks
from respools_databricks import DatabricksBackend
from respools_databricks.settings import DatabricksSettings

from respools.backends.jobs import JobPhase
from respools.client import ApiError, Client
from respools.client.jobs import JobRun
from respools.client.retry import Backoff
from respools.client.spec import build_spec
from respools.model import RequestState

DatabricksPool = Callable[[str], tuple[str, Client]]
COMMAND = ["python", "/Workspace/Users/ml@example.com/train.py", "--epochs", "3"]


def backend() -> DatabricksBackend:
    def workspace(settings: DatabricksSettings) -> WorkspaceClient:
        return WorkspaceClient(config=Config(host=settings.host, token="dapi-test-token", retry_timeout_seconds=5))

    return DatabricksBackend(workspace_factory=workspace, retry_backoff_s=0.05)


def assert_lease_scoped(token: str, client: Client, lease_id: str) -> None:
    """The job's RESPOOLS_TOKEN is not the subject's: it was good for its lease only, and ended with it."""
    assert token and token != client.config.token
    with Client(client.url, token) as scoped, pytest.raises(ApiError) as ended:
        scoped.get_lease(lease_id)
    assert ended.value.status == 401 and f"lease {lease_id} is released" in ended.value.detail


def job_run(client: Client, pool: str, said: list[str], gpu: float = 4, **spec: object) -> JobRun:
    return JobRun(
        client,
        build_spec(gpu=gpu, pool=[pool], **spec),  # type: ignore[arg-type]
        COMMAND,
        runner_for=backend().job_runner,
        poll_s=0.05,
        backoff=Backoff(base_s=0.05),
        progress=False,
        say=said.append,
    )


def test_grant_submits_the_leases_cluster_and_success_releases(databricks_pool: DatabricksPool) -> None:
    with FakeDatabricks() as fake:
        pool, client = databricks_pool(fake.host)
        said: list[str] = []
        outcome = job_run(client, pool, said).run()

        assert (outcome.status.phase, outcome.exit_status, outcome.attempts) == (JobPhase.SUCCEEDED, 0, 1)
        (run,) = fake.runs.values()
        (task,) = run.tasks
        cluster = task.new_cluster
        assert cluster is not None and task.spark_python_task is not None
        assert (cluster.node_type_id, cluster.num_workers) == ("g5.12xlarge", 0)
        assert cluster.spark_version == "15.4.x-gpu-ml-scala2.12"
        assert task.spark_python_task.python_file == "/Workspace/Users/ml@example.com/train.py"
        assert task.spark_python_task.parameters == ["--epochs", "3"]
        (lease,) = client.list_leases()
        tags = cluster.custom_tags or {}
        assert {key: tags[key] for key in tags if key.startswith("respools_")} == {
            "respools_lease_id": lease.id,
            "respools_request_id": lease.request_id,
            "respools_subject": lease.subject,
            "respools_attempt": "0",
        }
        env = cluster.spark_env_vars or {}
        assert (env["RESPOOLS_LEASE_ID"], env["RESPOOLS_ATTEMPT"], env["RESPOOLS_URL"]) == (lease.id, "0", client.url)
        assert_lease_scoped(env["RESPOOLS_TOKEN"], client, lease.id)
        assert lease.state == RequestState.RELEASED
        assert "succeeded" in said[-1]


@pytest.mark.skipif(
    not (os.environ.get("DATABRICKS_HOST") and os.environ.get("DATABRICKS_TOKEN")),
    reason="live Databricks test: needs DATABRICKS_HOST and DATABRICKS_TOKEN (and RESPOOLS_DATABRICKS_PYTHON_FILE, "
    "a workspace path of a script to run)",
)
def test_live_databricks_run_from_a_lease(databricks_pool: DatabricksPool) -> None:
    pool, client = databricks_pool(os.environ["DATABRICKS_HOST"])
    python_file = os.environ.get("RESPOOLS_DATABRICKS_PYTHON_FILE", "/Workspace/Shared/respools_live.py")
    run = JobRun(
        client,
        build_spec(gpu=1, pool=[pool]),
        ["python", python_file],
        runner_for=DatabricksBackend().job_runner,
        poll_s=15,
        progress=False,
    )
    assert run.run().status.phase == JobPhase.SUCCEEDED


def test_capacity_warning_when_the_workspace_has_no_gpu_node_type(make_pool: Callable[..., object]) -> None:
    cpu_only = [
        {
            "node_type_id": "m5.xlarge",
            "num_gpus": 0,
            "num_cores": 4,
            "memory_mb": 16384,
            "description": "m5.xlarge",
            "instance_type_id": "m5.xlarge",
            "spark_version": "",
            "category": "General Purpose",
        }
    ]
    with FakeDatabricks(node_types=cpu_only) as fake:
        pool = make_pool(capacity={"gpu": 8}, settings={"host": fake.host, "node_types": {}})
        (warning,) = backend().capacity_warnings(pool)  # type: ignore[arg-type]
        assert "lists no usable GPU node type" in warning
        assert ("GET", "/api/2.1/clusters/list-node-types") in fake.calls
        with_gpus = make_pool(capacity={"gpu": 8}, settings={"host": fake.host})
        assert backend().capacity_warnings(with_gpus) == []  # type: ignore[arg-type]
