"""A real ZenML pipeline on the pooled Databricks orchestrator, against the fake Databricks workspace
(``integrations/databricks/tests/fake_databricks.py``, which runs each job run's wheel tasks on this
machine) and a real respools server.

ZenML's own Databricks orchestrator builds the wheel of the pipeline's code, uploads it, creates the job
and starts it; each task is ZenML's real step entrypoint, which records its step run in the pipeline's
store as it would on a cluster. The pooled orchestrator takes the lease first, sets the job cluster from it,
holds it while the run lives, and at a preemption deadline cancels the run and resubmits the remaining
steps on the next grant, in the same ZenML run. (One test covers the plain path too: the second attempt
is granted, runs and releases its lease; each job costs a wheel build and a ZenML process per step.)
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from provider_jobs import keep_event_log, wait_until
from respools_server import RespoolsServer, World

sys.path.insert(0, str(Path(__file__).parents[2] / "databricks" / "tests"))
from fake_databricks import Executor, FakeDatabricks, FakeRun

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SCRIPT = Path(__file__).with_name("zenml_databricks.py")
GPU_ML_RUNTIME = "15.4.x-gpu-ml-scala2.12"


@pytest.fixture
def databricks_world(respools_server: RespoolsServer) -> Callable[[str], World]:
    def make(host: str) -> World:
        settings = {"host": host, "spark_version": GPU_ML_RUNTIME, "node_types": {"1": "g5.xlarge", "4": "g5.12xlarge"}}
        return respools_server.world(
            {"gpu": 8},
            {"reserved": {"gpu": 8}, "priority": 10},
            stack="databricks",
            preemption_grace_s=1.0,
            settings=settings,
        )

    return make


class Pipeline:
    """The pipeline's process, run from a project directory holding only its script (the wheel's code)."""

    def __init__(self, tmp_path: Path, world: World, host: str, env: dict[str, str], marker: Path | None) -> None:
        project = tmp_path / "project"
        project.mkdir()
        shutil.copy(SCRIPT, project)
        self.out, self.log = tmp_path / "summary.json", tmp_path / "pipeline.log"
        argv = [sys.executable, SCRIPT.name, "--url", world.url, "--token", world.token, "--pool", world.pool]
        argv += ["--host", host, "--out", str(self.out), "--marker", str(marker or "")]
        with self.log.open("wb") as sink:
            self.process = subprocess.Popen(argv, env=env, cwd=project, stdout=sink, stderr=subprocess.STDOUT)

    def result(self, timeout: float) -> dict[str, Any]:
        try:
            self.process.wait(timeout)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
        assert self.process.returncode == 0, self.tail()
        result: dict[str, Any] = json.loads(self.out.read_text())
        assert result["status"] == "completed", (result, self.tail())
        return result

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-6000:]


@pytest.fixture
def databricks_env(pipeline_env: dict[str, str]) -> dict[str, str]:
    """Token auth for the SDK against the fake; ZenML's ``pip wheel`` built with this venv's setuptools."""
    return pipeline_env | {"DATABRICKS_TOKEN": "dapi-test-token", "PIP_NO_BUILD_ISOLATION": "0"}


def executor(env: dict[str, str], tmp_path: Path) -> Executor:
    logs = tmp_path / "tasks"
    logs.mkdir()
    return Executor(env=env, cwd=str(tmp_path), log_dir=str(logs))


def assert_leased_cluster(fake: FakeDatabricks, run: FakeRun, lease_id: str, attempt: int) -> None:
    """The job ZenML created runs on the lease's cluster, tagged and with the lease in its environment."""
    (cluster,) = [c.new_cluster for c in run.job_clusters if c.new_cluster is not None]
    assert (cluster.node_type_id, cluster.num_workers, cluster.spark_version) == ("g5.12xlarge", 0, GPU_ML_RUNTIME)
    tags = cluster.custom_tags or {}
    assert (tags["respools_lease_id"], tags["respools_attempt"]) == (lease_id, str(attempt))
    env = cluster.spark_env_vars or {}
    assert (env["RESPOOLS_LEASE_ID"], env["RESPOOLS_ATTEMPT"]) == (lease_id, str(attempt))
    assert env["RESPOOLS_ZENML_ORCHESTRATOR_RUN_ID"].startswith("respools-")
    assert run.job_id is not None and (fake.jobs[run.job_id].tags or {})["respools_lease_id"] == lease_id
    for task in run.tasks:
        assert task.python_wheel_task.package_name == "zenml"  # ZenML's own tasks, from its uploaded wheel
        assert any(library.whl in fake.files for library in task.libraries)


def test_pooled_databricks_pipeline_is_preempted_cancelled_requeued_and_finishes(
    respools_server: RespoolsServer,
    databricks_world: Callable[[str], World],
    databricks_env: dict[str, str],
    tmp_path: Path,
) -> None:
    with FakeDatabricks(execute=executor(databricks_env, tmp_path)) as fake:
        world = databricks_world(fake.host)
        marker = tmp_path / "marker.json"
        pipeline = Pipeline(tmp_path, world, fake.host, databricks_env, marker)
        first = wait_until(
            lambda: marker.exists() and json.loads(marker.read_text()), 240, "the train step", pipeline.process
        )
        respools_server.ok("POST", f"/v1/leases/{first['lease']}/preempt", json={"grace_s": 1.0})
        result = pipeline.result(240)
        runs = list(fake.runs.values())

        steps = [(step["name"], step["status"]) for step in result["steps"]]
        assert steps == [("prepare", "completed"), ("train", "retried"), ("train", "completed")]
        second = result["steps"][2]["outputs"]["output"]
        assert second["attempt"] == 1 and second["lease"] != first["lease"] and second["epochs"] == 3
        assert (second["url"], second["token"]) == (world.url, True)  # the lease reached the task
        assert [run.state for run in runs] == [("TERMINATED", "CANCELED"), ("TERMINATED", "SUCCESS")]
        assert_leased_cluster(fake, runs[0], first["lease"], attempt=0)
        assert_leased_cluster(fake, runs[1], second["lease"], attempt=1)
        # The second job runs only the step left to do: prepare's output comes from the first job.
        assert [task.task_key.rsplit("_", 1)[-1] for task in runs[1].tasks] == ["train"]
        leases = {lease["id"]: lease for lease in respools_server.leases(world.pool)}
        assert leases[first["lease"]]["state"] == "preempted"
        assert leases[second["lease"]]["state"] == "released"
        assert leases[first["lease"]]["request_id"] == leases[second["lease"]]["request_id"]  # requeued
        cancelled_at = next(at for at, state in runs[0].history if state == "TERMINATED/CANCELED")
        regranted_at = datetime.fromisoformat(leases[second["lease"]]["granted_at"]).timestamp()
        assert regranted_at >= cancelled_at  # the capacity went back only once the first run was terminal
        released_at = datetime.fromisoformat(leases[second["lease"]]["released_at"]).timestamp()
        assert released_at >= runs[1].history[-1][0]  # released once the second run was terminal
        assert leases[second["lease"]]["resources"]["gpu"] == 4.0
        keep_event_log("zenml-databricks", respools_server.events(world.pool), runs)
