"""A lease's life as a Vertex AI custom job: the shared runner loop (respools.client.jobs) with the Vertex
runner, through the real JobServiceClient (REST) against the fake customJobs API, holding leases from a
real respools service."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

import pytest
from fake_vertex import RUNS_ON, FakeVertex
from respools_vertex import VertexBackend

from respools.backends.jobs import JobError, JobPhase
from respools.client import ApiError, Client
from respools.client.jobs import JobRun
from respools.client.retry import Backoff
from respools.client.spec import build_spec
from respools.model import RequestState

VertexPool = Callable[[str], tuple[str, Client]]
BACKEND = VertexBackend(retry_backoff_s=0.05)


def assert_lease_scoped(token: str, client: Client, lease_id: str) -> None:
    """The job's RESPOOLS_TOKEN is not the subject's: it was good for its lease only, and ended with it."""
    assert token and token != client.config.token
    with Client(client.url, token) as scoped, pytest.raises(ApiError) as ended:
        scoped.get_lease(lease_id)
    assert ended.value.status == 401 and f"lease {lease_id} is released" in ended.value.detail


def job_run(client: Client, pool: str, said: list[str], **spec: object) -> JobRun:
    return JobRun(
        client,
        build_spec(gpu=2, pool=[pool], **spec),  # type: ignore[arg-type]
        ["python", "train.py", "--epochs", "3"],
        image="us-docker.pkg.dev/ml-prod/train/trainer:1",
        runner_for=BACKEND.job_runner,
        poll_s=0.05,
        backoff=Backoff(base_s=0.05),
        progress=False,
        say=said.append,
    )


def env_of(job: object) -> dict[str, str]:
    return {var.name: var.value for var in job.job_spec.worker_pool_specs[0].container_spec.env}  # type: ignore[attr-defined]


def test_grant_submits_the_leases_machine_and_success_releases(vertex_pool: VertexPool) -> None:
    with FakeVertex() as fake:
        pool, client = vertex_pool(fake.endpoint)
        said: list[str] = []
        outcome = job_run(client, pool, said).run()

        assert (outcome.status.phase, outcome.exit_status, outcome.attempts) == (JobPhase.SUCCEEDED, 0, 1)
        (job,) = fake.created()
        chief = job.job_spec.worker_pool_specs[0]
        assert (chief.machine_spec.machine_type, chief.machine_spec.accelerator_count) == ("a2-highgpu-2g", 2)
        assert chief.machine_spec.accelerator_type.name == "NVIDIA_TESLA_A100"
        assert chief.container_spec.image_uri == "us-docker.pkg.dev/ml-prod/train/trainer:1"
        assert list(chief.container_spec.command) == ["python", "train.py", "--epochs", "3"]
        (lease,) = client.list_leases()
        assert env_of(job)["RESPOOLS_LEASE_ID"] == lease.id
        assert env_of(job)["RESPOOLS_ATTEMPT"] == "0" and env_of(job)["RESPOOLS_URL"] == client.url
        assert_lease_scoped(env_of(job)["RESPOOLS_TOKEN"], client, lease.id)
        assert dict(job.labels) == {
            "respools-lease-id": lease.id.lower(),
            "respools-request-id": lease.request_id.lower(),
            "respools-subject": lease.subject,
            "respools-attempt": "0",
        }
        assert lease.state == RequestState.RELEASED
        assert any("submitted job" in line for line in said) and "succeeded" in said[-1]


@pytest.mark.skipif(
    not (os.environ.get("GOOGLE_APPLICATION_CREDENTIALS") and os.environ.get("RESPOOLS_VERTEX_PROJECT")),
    reason="live Vertex AI test: needs GOOGLE_APPLICATION_CREDENTIALS and RESPOOLS_VERTEX_PROJECT "
    "(and RESPOOLS_VERTEX_REGION, RESPOOLS_VERTEX_IMAGE)",
)
def test_live_vertex_job_runs_from_a_lease(vertex_pool: VertexPool, admin: Client) -> None:
    region = os.environ.get("RESPOOLS_VERTEX_REGION", "us-central1")
    pool, client = vertex_pool(f"{region}-aiplatform.googleapis.com")
    admin.put(
        f"/v1/pools/{pool}",
        client.get_pool(pool).model_dump(mode="json", exclude={"created_at", "updated_at"})
        | {
            "settings": {
                "project": os.environ["RESPOOLS_VERTEX_PROJECT"],
                "region": region,
                "accelerator_type": "NVIDIA_TESLA_T4",
                "gpu_quota": 1,
            }
        },
    )
    image = os.environ.get("RESPOOLS_VERTEX_IMAGE", "python:3.11-slim")
    run = JobRun(
        client,
        build_spec(gpu=1, pool=[pool]),
        ["python", "-c", "print('ok')"],
        image=image,
        runner_for=VertexBackend().job_runner,
        poll_s=15,
        progress=False,
    )
    assert run.run().status.phase == JobPhase.SUCCEEDED


def test_a_job_whose_watch_fails_for_good_is_cancelled_before_the_lease_goes(vertex_pool: VertexPool) -> None:
    with FakeVertex() as fake:
        pool, client = vertex_pool(fake.endpoint)
        fake.plan(RUNS_ON)
        failures: list[BaseException] = []

        def run() -> None:
            try:
                job_run(client, pool, []).run()
            except JobError as exc:
                failures.append(exc)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not any(f.job.state.name == "JOB_STATE_RUNNING" for f in fake.jobs.values()):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        fake.fail(401)
        thread.join(timeout=30)

        (failure,) = failures
        assert "Vertex AI get custom job" in str(failure)
        (job,) = fake.jobs.values()
        assert job.job.state.name == "JOB_STATE_CANCELLING"
        (lease,) = client.list_leases()
        assert lease.state == RequestState.RELEASED
