"""A lease's life as a Vertex AI custom job: the shared runner loop (respools.client.jobs) with the Vertex
runner, through the real JobServiceClient (REST) against the fake customJobs API, holding leases from a
real respools service."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest
from fake_vertex import FAILS, RUNS_ON, FakeVertex
from respools_vertex import VertexBackend

from respools.backends.jobs import JobError, JobLaunch, JobPhase
from respools.client import ApiError, Client
from respools.client.jobs import JobOutcome, JobRun
from respools.client.retry import Backoff
from respools.client.spec import build_spec
from respools.model import Event, EventKind, RequestState

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


def test_a_failed_job_releases_the_lease_and_shows_the_providers_message(vertex_pool: VertexPool) -> None:
    with FakeVertex() as fake:
        pool, client = vertex_pool(fake.endpoint)
        fake.plan(FAILS, "The replica workerpool0-0 exited with a non-zero status of 2.")
        said: list[str] = []
        outcome = job_run(client, pool, said).run()

        assert (outcome.status.phase, outcome.exit_status) == (JobPhase.FAILED, 1)
        assert outcome.status.message == "The replica workerpool0-0 exited with a non-zero status of 2."
        assert said[-1].endswith("failed: The replica workerpool0-0 exited with a non-zero status of 2.")
        (lease,) = client.list_leases()
        assert lease.state == RequestState.RELEASED


def test_preemption_cancels_at_the_deadline_releases_when_cancelled_and_resubmits_the_next_attempt(
    vertex_pool: VertexPool, admin: Client
) -> None:
    with FakeVertex() as fake:
        pool, client = vertex_pool(fake.endpoint)
        fake.plan(RUNS_ON)
        said: list[str] = []
        run = job_run(client, pool, said, preemptible=True, max_retries=1)
        outcomes: list[JobOutcome] = []
        thread = threading.Thread(target=lambda: outcomes.append(run.run()), daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not any(f.job.state.name == "JOB_STATE_RUNNING" for f in fake.jobs.values()):
            assert time.monotonic() < deadline, said
            time.sleep(0.05)
        (first_lease,) = client.list_leases()
        noticed = admin.preempt_lease(first_lease.id, grace_s=1.0)
        thread.join(timeout=60)

        (outcome,) = outcomes
        assert (outcome.status.phase, outcome.attempts) == (JobPhase.SUCCEEDED, 2)
        first, second = fake.jobs.values()
        states = [state for _, state in first.history]
        assert states[-2:] == ["JOB_STATE_CANCELLING", "JOB_STATE_CANCELLED"]
        cancelling_at = next(at for at, state in first.history if state == "JOB_STATE_CANCELLING")
        assert noticed.preempt_deadline is not None
        assert cancelling_at >= noticed.preempt_deadline.timestamp() - 0.05  # cancelled at the deadline, not at notice
        cancelled_at = first.history[-1][0]
        assert second.history[0][0] >= cancelled_at  # resubmitted only after the first job was terminal
        assert second.job.labels["respools-attempt"] == "1" and env_of(second.job)["RESPOOLS_ATTEMPT"] == "1"
        events = client.events(request_id=first_lease.request_id, limit=100)
        kinds = [event.kind for event in events]
        assert kinds.count(EventKind.GRANTED) == 2 and EventKind.REQUEUED in kinds
        released = [e for e in events if e.kind == EventKind.RELEASED and e.lease_id == first_lease.id]
        assert all(e.at.timestamp() >= cancelled_at - 0.05 for e in released)
        _keep_event_log("vertex", events, first.history, second.history)


def test_transient_api_errors_are_retried_and_permanent_ones_surface(vertex_pool: VertexPool) -> None:
    with FakeVertex() as fake:
        pool, client = vertex_pool(fake.endpoint)
        fake.fail(429)
        fake.fail(500)
        outcome = job_run(client, pool, []).run()
        assert outcome.status.phase == JobPhase.SUCCEEDED
        assert not fake.errors and len(fake.jobs) == 1  # both errors were answered, the job created once

        fake.fail(403, times=10)
        with pytest.raises(JobError, match=r"Vertex AI list custom job: 403 .*fake Vertex AI answers 403"):
            job_run(client, pool, []).run()
        leases = client.list_leases()
        assert all(lease.state != RequestState.ACTIVE for lease in leases)


def test_a_restarted_runner_finds_its_job_by_label_and_carries_on(vertex_pool: VertexPool) -> None:
    with FakeVertex() as fake:
        pool, client = vertex_pool(fake.endpoint)
        spec = build_spec(gpu=2, pool=[pool], idempotency_key="rpk_restart_vertex_1")
        # The first runner got as far as submitting the job, then died: its request is granted, its lease
        # active, its job queued at Vertex.
        request = client.submit(spec, wait=10)
        assert request.lease_id is not None
        lease = client.heartbeat(request.lease_id)
        launch = JobLaunch(lease=lease, pool=client.get_pool(pool), command=["python", "train.py"], image="img:1")
        submitted = BACKEND.job_runner(client.get_pool(pool)).submit(launch)

        said: list[str] = []
        restarted = JobRun(
            client,
            spec,
            ["python", "train.py"],
            image="img:1",
            runner_for=BACKEND.job_runner,
            poll_s=0.05,
            progress=False,
            say=said.append,
        )
        outcome = restarted.run()
        assert outcome.status.job_id == submitted.job_id and outcome.status.phase == JobPhase.SUCCEEDED
        assert len(fake.jobs) == 1 and any(f"found job {submitted.job_id}" in line for line in said)
        assert client.get_lease(lease.id).state == RequestState.RELEASED


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


def _keep_event_log(stack: str, events: list[Event], *histories: list[tuple[float, str]]) -> None:
    """Where RESPOOLS_EVENT_LOG_DIR is set, write the run's respools events and the jobs' provider states
    (the closing note of issue 22 shows them)."""
    directory = os.environ.get("RESPOOLS_EVENT_LOG_DIR")
    if not directory:
        return
    lines = [
        f"{e.at.isoformat(timespec='milliseconds')} {e.kind.value:<10} lease={e.lease_id} {e.message}" for e in events
    ]
    for number, history in enumerate(histories, 1):
        lines += [
            f"{datetime.fromtimestamp(at).astimezone().isoformat(timespec='milliseconds')} job{number} {state}"
            for at, state in history
        ]
    Path(directory, f"{stack}-events.txt").write_text("\n".join(sorted(lines)) + "\n")
    Path(directory, f"{stack}-events.json").write_text(json.dumps(lines, indent=1))


@pytest.mark.slow
def test_respools_run_on_a_vertex_pool_is_preempted_requeued_and_finishes(
    vertex_pool: VertexPool, admin: Client
) -> None:
    with FakeVertex() as fake:
        pool, client = vertex_pool(fake.endpoint)
        fake.plan(RUNS_ON)
        env = os.environ | {"RESPOOLS_URL": client.url, "RESPOOLS_TOKEN": client.config.token or ""}
        argv = [
            sys.executable,
            "-W",
            "ignore",
            "-c",
            "from respools.cli import app; app()",
            "run",
            "--pool",
            pool,
            "--gpu",
            "2",
            "--preemptible",
            "--max-retries",
            "1",
            "--retry-backoff",
            "0.1",
            "--poll",
            "0.1",
            "--no-progress",
            "--image",
            "us-docker.pkg.dev/ml-prod/train/trainer:1",
            "--",
            "python",
            "train.py",
        ]
        run = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not any(f.job.state.name == "JOB_STATE_RUNNING" for f in fake.jobs.values()):
            assert time.monotonic() < deadline and run.poll() is None, run.stderr.read() if run.stderr else ""
            time.sleep(0.1)
        (lease,) = client.list_leases()
        admin.preempt_lease(lease.id, grace_s=1.0)
        _, err = run.communicate(timeout=90)

        assert run.returncode == 0, err
        first, second = fake.jobs.values()
        assert first.job.state.name == "JOB_STATE_CANCELLED" and second.job.state.name == "JOB_STATE_SUCCEEDED"
        assert second.job.labels["respools-attempt"] == "1"
        # The job is cancelled at the deadline by the runner or by the service's own stop (VertexBackend.stop),
        # whichever comes first; the next attempt is submitted only once it is CANCELLED.
        for shown in (
            "submitted job",
            "running",
            "preemption notice",
            "cancelled (JOB_STATE_CANCELLED)",
            "requeued: attempt 1",
            "attempt 1: submitted job",
            "succeeded",
        ):
            assert shown in err, (shown, err)
        assert err.index("cancelled (JOB_STATE_CANCELLED)") < err.index("attempt 1: submitted job")


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
