"""What every job runner must do with a lease, once per stack: the shared runner loop (respools.client.jobs)
with each stack's runner, through the provider's real SDK against its wire fake (``fake_vertex.py``,
``fake_databricks.py``), holding leases from a real respools service. What the job must look like (machine,
cluster, labels, environment) is stack-specific and tested beside each runner
(``integrations/*/tests/test_*_runner.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from databricks.sdk import WorkspaceClient
from databricks.sdk.config import Config
from respools_databricks import DatabricksBackend
from respools_databricks.settings import DatabricksSettings
from respools_vertex import VertexBackend

from respools.backends.jobs import JobError, JobLaunch, JobPhase
from respools.backends.protocol import Backend
from respools.client import Client
from respools.client.jobs import JobOutcome, JobRun
from respools.client.retry import Backoff
from respools.client.spec import build_spec
from respools.model import Event, EventKind, RequestState

sys.path.insert(0, str(Path(__file__).parents[1] / "vertex" / "tests"))
sys.path.insert(0, str(Path(__file__).parents[1] / "databricks" / "tests"))
import fake_databricks
import fake_vertex

if TYPE_CHECKING:
    from integrations.conftest import StackPool


@dataclass(frozen=True)
class Stack:
    """One stack's runner as this suite drives it, and how to read its fake."""

    name: str
    fake: Callable[[], Any]
    address: Callable[[Any], str]
    settings: Callable[[str], dict[str, Any]]
    backend: Backend
    gpu: int
    command: list[str]
    image: str | None
    runs_on: list[Any]
    fails: list[Any]
    failure: str
    jobs: Callable[[Any], list[Any]]
    """The fake's jobs in submission order; each has ``history``: (time, provider state) entries."""
    running: str
    cancelling: str
    cancelled: str
    attempt_of: Callable[[Any], tuple[str, str]]
    """A job's attempt as its label (or tag) says and as its environment says."""
    permanent: tuple[int, str]
    """A status the provider refuses with for good, and what the raised error says."""
    succeeded: str
    cli_env: dict[str, str]
    """What ``respools run`` needs besides respools' own settings (the provider's credentials)."""
    cli_shows: tuple[str, ...] = ()
    """Lines only this stack's ``respools run`` is sure to print."""


def _databricks_backend() -> DatabricksBackend:
    def workspace(settings: DatabricksSettings) -> WorkspaceClient:
        return WorkspaceClient(config=Config(host=settings.host, token="dapi-test-token", retry_timeout_seconds=5))

    return DatabricksBackend(workspace_factory=workspace, retry_backoff_s=0.05)


def _vertex_env(job: Any) -> dict[str, str]:
    return {var.name: var.value for var in job.job.job_spec.worker_pool_specs[0].container_spec.env}


def _cluster(run: Any) -> Any:
    return run.tasks[0].new_cluster


VERTEX = Stack(
    name="vertex",
    fake=fake_vertex.FakeVertex,
    address=lambda fake: fake.endpoint,
    settings=lambda endpoint: {
        "project": "ml-prod",
        "accelerator_type": "NVIDIA_TESLA_A100",
        "gpu_quota": 8,
        "api_endpoint": endpoint,
    },
    backend=VertexBackend(retry_backoff_s=0.05),
    gpu=2,
    command=["python", "train.py", "--epochs", "3"],
    image="us-docker.pkg.dev/ml-prod/train/trainer:1",
    runs_on=fake_vertex.RUNS_ON,
    fails=fake_vertex.FAILS,
    failure="The replica workerpool0-0 exited with a non-zero status of 2.",
    jobs=lambda fake: list(fake.jobs.values()),
    running="JOB_STATE_RUNNING",
    cancelling="JOB_STATE_CANCELLING",
    cancelled="JOB_STATE_CANCELLED",
    attempt_of=lambda job: (job.job.labels["respools-attempt"], _vertex_env(job)["RESPOOLS_ATTEMPT"]),
    permanent=(403, r"Vertex AI list custom job: 403 .*fake Vertex AI answers 403"),
    succeeded="JOB_STATE_SUCCEEDED",
    cli_env={},
    # The job is cancelled at the deadline by the runner or by the service's own stop (VertexBackend.stop),
    # whichever comes first, so the runner's "cancelling job" line may not come.
)
DATABRICKS = Stack(
    name="databricks",
    fake=fake_databricks.FakeDatabricks,
    address=lambda fake: fake.host,
    settings=lambda host: {
        "host": host,
        "spark_version": "15.4.x-gpu-ml-scala2.12",
        "node_types": {"1": "g5.xlarge", "4": "g5.12xlarge"},
    },
    backend=_databricks_backend(),
    gpu=4,
    command=["python", "/Workspace/Users/ml@example.com/train.py", "--epochs", "3"],
    image=None,
    runs_on=fake_databricks.RUNS_ON,
    fails=fake_databricks.FAILS,
    failure="Workload failed, see run output for details",
    jobs=lambda fake: list(fake.runs.values()),
    running="RUNNING",
    cancelling="TERMINATING/CANCELED",
    cancelled="TERMINATED/CANCELED",
    attempt_of=lambda run: (
        (_cluster(run).custom_tags or {})["respools_attempt"],
        (_cluster(run).spark_env_vars or {})["RESPOOLS_ATTEMPT"],
    ),
    permanent=(401, r"Databricks runs/list: UNAUTHENTICATED: fake workspace answers 401"),
    succeeded="TERMINATED/SUCCESS",
    cli_env={"DATABRICKS_TOKEN": "dapi-test-token"},
    cli_shows=("cancelling job",),  # the service has no workspace token here: only the runner cancels
)
STACKS = [pytest.param(VERTEX, id="vertex"), pytest.param(DATABRICKS, id="databricks")]


def job_run(stack: Stack, client: Client, pool: str, said: list[str], **spec: object) -> JobRun:
    return JobRun(
        client,
        build_spec(gpu=stack.gpu, pool=[pool], **spec),  # type: ignore[arg-type]
        stack.command,
        image=stack.image,
        runner_for=stack.backend.job_runner,  # type: ignore[arg-type]
        poll_s=0.05,
        backoff=Backoff(base_s=0.05),
        progress=False,
        say=said.append,
    )


def wait_for_running(stack: Stack, fake: Any, said: list[str]) -> None:
    deadline = time.monotonic() + 30
    while not any(job.history and job.history[-1][1] == stack.running for job in stack.jobs(fake)):
        assert time.monotonic() < deadline, said
        time.sleep(0.05)


def keep_event_log(stack: str, events: list[Event], *histories: list[tuple[float, str]]) -> None:
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


@pytest.mark.parametrize("stack", STACKS)
def test_a_failed_job_releases_the_lease_and_shows_the_providers_message(stack: Stack, stack_pool: StackPool) -> None:
    with stack.fake() as fake:
        pool, client = stack_pool(stack.name, stack.settings(stack.address(fake)))
        fake.plan(stack.fails, stack.failure)
        said: list[str] = []
        outcome = job_run(stack, client, pool, said).run()

        assert (outcome.status.phase, outcome.exit_status) == (JobPhase.FAILED, 1)
        assert outcome.status.message == stack.failure
        assert said[-1].endswith(f"failed: {stack.failure}")
        (lease,) = client.list_leases()
        assert lease.state == RequestState.RELEASED


@pytest.mark.parametrize("stack", STACKS)
def test_preemption_cancels_at_the_deadline_releases_when_terminal_and_resubmits_the_next_attempt(
    stack: Stack, stack_pool: StackPool, admin: Client
) -> None:
    with stack.fake() as fake:
        pool, client = stack_pool(stack.name, stack.settings(stack.address(fake)))
        fake.plan(stack.runs_on)
        said: list[str] = []
        run = job_run(stack, client, pool, said, preemptible=True, max_retries=1)
        outcomes: list[JobOutcome] = []
        thread = threading.Thread(target=lambda: outcomes.append(run.run()), daemon=True)
        thread.start()
        wait_for_running(stack, fake, said)
        (first_lease,) = client.list_leases()
        noticed = admin.preempt_lease(first_lease.id, grace_s=1.0)
        thread.join(timeout=60)

        (outcome,) = outcomes
        assert (outcome.status.phase, outcome.attempts) == (JobPhase.SUCCEEDED, 2)
        first, second = stack.jobs(fake)
        assert [state for _, state in first.history][-2:] == [stack.cancelling, stack.cancelled]
        cancelling_at = next(at for at, state in first.history if state == stack.cancelling)
        assert noticed.preempt_deadline is not None
        assert cancelling_at >= noticed.preempt_deadline.timestamp() - 0.05  # at the deadline, not at notice
        cancelled_at = first.history[-1][0]
        assert second.history[0][0] >= cancelled_at  # resubmitted only once the first job was terminal
        assert stack.attempt_of(second) == ("1", "1")
        events = client.events(request_id=first_lease.request_id, limit=100)
        kinds = [event.kind for event in events]
        assert kinds.count(EventKind.GRANTED) == 2 and EventKind.REQUEUED in kinds
        released = [e for e in events if e.kind == EventKind.RELEASED and e.lease_id == first_lease.id]
        assert all(e.at.timestamp() >= cancelled_at - 0.05 for e in released)
        keep_event_log(stack.name, events, first.history, second.history)


@pytest.mark.parametrize("stack", STACKS)
def test_transient_api_errors_are_retried_and_permanent_ones_surface(stack: Stack, stack_pool: StackPool) -> None:
    with stack.fake() as fake:
        pool, client = stack_pool(stack.name, stack.settings(stack.address(fake)))
        fake.fail(429)
        fake.fail(500)
        outcome = job_run(stack, client, pool, []).run()
        assert outcome.status.phase == JobPhase.SUCCEEDED
        assert not fake.errors and len(stack.jobs(fake)) == 1  # both errors were answered, the job created once

        status, says = stack.permanent
        fake.fail(status, times=10)
        with pytest.raises(JobError, match=says):
            job_run(stack, client, pool, []).run()
        assert all(lease.state != RequestState.ACTIVE for lease in client.list_leases())


@pytest.mark.parametrize("stack", STACKS)
def test_a_restarted_runner_finds_its_job_by_label_and_carries_on(stack: Stack, stack_pool: StackPool) -> None:
    with stack.fake() as fake:
        pool, client = stack_pool(stack.name, stack.settings(stack.address(fake)))
        spec = build_spec(gpu=stack.gpu, pool=[pool], idempotency_key=f"rpk_restart_{stack.name}_1")
        # The first runner got as far as submitting the job, then died: its request is granted, its lease
        # active, its job queued at the provider.
        request = client.submit(spec, wait=10)
        assert request.lease_id is not None
        lease = client.heartbeat(request.lease_id)
        launch = JobLaunch(lease=lease, pool=client.get_pool(pool), command=stack.command, image=stack.image)
        runner = stack.backend.job_runner(client.get_pool(pool))
        assert runner is not None
        submitted = runner.submit(launch)

        said: list[str] = []
        restarted = JobRun(
            client,
            spec,
            stack.command,
            image=stack.image,
            runner_for=stack.backend.job_runner,  # type: ignore[arg-type]
            poll_s=0.05,
            progress=False,
            say=said.append,
        )
        outcome = restarted.run()
        assert outcome.status.job_id == submitted.job_id and outcome.status.phase == JobPhase.SUCCEEDED
        assert len(stack.jobs(fake)) == 1 and any(f"found job {submitted.job_id}" in line for line in said)
        assert client.get_lease(lease.id).state == RequestState.RELEASED


@pytest.mark.slow
@pytest.mark.parametrize("stack", STACKS)
def test_respools_run_is_preempted_requeued_and_finishes(stack: Stack, stack_pool: StackPool, admin: Client) -> None:
    with stack.fake() as fake:
        pool, client = stack_pool(stack.name, stack.settings(stack.address(fake)))
        fake.plan(stack.runs_on)
        env = os.environ | stack.cli_env | {"RESPOOLS_URL": client.url, "RESPOOLS_TOKEN": client.config.token or ""}
        argv = [sys.executable, "-W", "ignore", "-c", "from respools.cli import app; app()", "run", "--pool", pool]
        argv += ["--gpu", str(stack.gpu), "--preemptible", "--max-retries", "1", "--retry-backoff", "0.1"]
        argv += ["--poll", "0.1", "--no-progress", *(["--image", stack.image] if stack.image else [])]
        argv += ["--", *stack.command]
        run = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not any(job.history and job.history[-1][1] == stack.running for job in stack.jobs(fake)):
            assert time.monotonic() < deadline and run.poll() is None, run.stderr.read() if run.stderr else ""
            time.sleep(0.1)
        (lease,) = client.list_leases()
        admin.preempt_lease(lease.id, grace_s=1.0)
        _, err = run.communicate(timeout=90)

        assert run.returncode == 0, err
        first, second = stack.jobs(fake)
        assert (first.history[-1][1], second.history[-1][1]) == (stack.cancelled, stack.succeeded)
        assert stack.attempt_of(second) == ("1", "1")
        for shown in (
            "submitted job",
            "running",
            "preemption notice",
            f"cancelled ({stack.cancelled})",
            "requeued: attempt 1",
            "attempt 1: submitted job",
            "succeeded",
            *stack.cli_shows,
        ):
            assert shown in err, (shown, err)
        assert err.index(f"cancelled ({stack.cancelled})") < err.index("attempt 1: submitted job")
