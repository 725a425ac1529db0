"""Real ZenML pipelines whose GPU step runs through a pooled step operator, against the fake Vertex AI
(``integrations/vertex/tests/fake_vertex.py``, which runs each job's container command on this machine)
and a real respools server: the pooled Vertex step operator, and the generic pooled step operator wrapping
ZenML's stock Vertex step operator (pointed at the fake).

The step's job is the step's real ZenML entrypoint: it loads the snapshot, runs the step and records the
step run in the pipeline's store, exactly as in a Vertex container. The pooled operator takes the lease in
the orchestrator's process before ZenML's own Vertex step operator submits the job, sets the job's machine
from the lease, cancels the job at the preemption deadline and hands the step back to ZenML's retry.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest
from provider_jobs import keep_event_log, wait_until
from respools_server import RespoolsServer, World

sys.path.insert(0, str(Path(__file__).parents[2] / "vertex" / "tests"))
from fake_vertex import Executor, FakeVertex

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SCRIPT = Path(__file__).with_name("zenml_step_operators.py")


@pytest.fixture
def vertex_world(respools_server: RespoolsServer) -> Callable[[str], World]:
    def make(endpoint: str) -> World:
        settings = {"project": "ml-prod", "accelerator_type": "NVIDIA_TESLA_A100", "gpu_quota": 2}
        return respools_server.world(
            {"gpu": 2},
            {"reserved": {"gpu": 2}, "priority": 10},
            stack="vertex",
            preemption_grace_s=1.0,
            settings=settings | {"api_endpoint": endpoint},
        )

    return make


@pytest.mark.parametrize("scenario", ["vertex", "generic"])
def test_pooled_vertex_step_is_preempted_cancelled_retried_and_finishes(
    scenario: str,
    respools_server: RespoolsServer,
    vertex_world: Callable[[str], World],
    pipeline_env: dict[str, str],
    tmp_path: Path,
) -> None:
    jobs_log = tmp_path / "jobs"
    jobs_log.mkdir()
    with FakeVertex(execute=Executor(env=pipeline_env, cwd=str(SCRIPT.parent), log_dir=str(jobs_log))) as fake:
        world = vertex_world(fake.endpoint)
        marker, out, log = tmp_path / "marker.json", tmp_path / "summary.json", tmp_path / "pipeline.log"
        argv = [sys.executable, str(SCRIPT), scenario, "--url", world.url, "--token", world.token]
        argv += ["--pool", world.pool, "--endpoint", fake.endpoint, "--out", str(out), "--marker", str(marker)]
        with log.open("wb") as sink:
            process = subprocess.Popen(argv, env=pipeline_env, cwd=SCRIPT.parent, stdout=sink, stderr=subprocess.STDOUT)
        try:
            first = wait_until(lambda: marker.exists() and json.loads(marker.read_text()), 300, "the step", process)
            (lease,) = [lease for lease in respools_server.leases(world.pool) if lease["id"] == first["lease"]]
            assert lease["state"] == "active" and lease["resources"]["gpu"] == 2.0
            respools_server.ok("POST", f"/v1/leases/{lease['id']}/preempt", json={"grace_s": 1.0})
            process.wait(300)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        assert process.returncode == 0, log.read_text(errors="replace")[-6000:]
        result = json.loads(out.read_text())
        jobs = list(fake.jobs.values())

        assert result["status"] == "completed", (result, log.read_text(errors="replace")[-6000:])
        assert [step["status"] for step in result["steps"]] == ["retried", "completed"]
        second = result["steps"][1]["outputs"]["output"]
        assert second["attempt"] == 1 and second["lease"] != first["lease"] and second["url"] == world.url
        assert first["token"]  # RESPOOLS_TOKEN reached the job (lease-scoped: tests/server/test_lease_tokens.py)
        assert [job.job.state.name for job in jobs] == ["JOB_STATE_CANCELLED", "JOB_STATE_SUCCEEDED"]
        for number, job in enumerate(jobs):
            chief = job.job.job_spec.worker_pool_specs[0]
            assert chief.container_spec.image_uri.endswith("zenml-step:1")  # ZenML's Vertex operator built it
            assert job.job.labels["source"].startswith("zenml-")
            machine = (chief.machine_spec.machine_type, chief.machine_spec.accelerator_count)
            if scenario == "vertex":  # the lease set the machine and labelled the job
                assert (
                    machine == ("a2-highgpu-2g", 2) and chief.machine_spec.accelerator_type.name == "NVIDIA_TESLA_A100"
                )
                assert job.job.labels["respools-attempt"] == str(number)
            else:  # the wrapped operator chose its machine from its own settings, as without respools
                assert machine == ("n1-standard-4", 0) and "respools-lease-id" not in job.job.labels
        if scenario == "vertex":
            assert jobs[0].job.labels["respools-lease-id"] == first["lease"].lower()
        leases = {lease["id"]: lease for lease in respools_server.leases(world.pool)}
        assert leases[first["lease"]]["state"] == "preempted"
        assert leases[second["lease"]]["state"] == "released"
        cancelled_at = next(at for at, state in jobs[0].history if state == "JOB_STATE_CANCELLED")
        regranted_at = datetime.fromisoformat(leases[second["lease"]]["granted_at"]).timestamp()
        if scenario == "vertex":
            # The capacity went back only once the first job was CANCELLED: the second lease came after.
            assert regranted_at >= cancelled_at
        # (The generic wrapper's job carries no lease label, so the vertex backend cannot see it: past the
        # deadline the service may confirm the stop before the wrapper's cancel lands. docs/zenml-step-operators.md)
        keep_event_log(f"zenml-{scenario}", respools_server.events(world.pool), jobs)
