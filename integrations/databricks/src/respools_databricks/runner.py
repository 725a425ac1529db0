"""A lease as a one-time Databricks run: submit, find by tag, watch, cancel through ``WorkspaceClient.jobs``.

Convention (what Databricks users expect): a *Python file task* (``spark_python_task``) on a job cluster.
The command after ``--`` is ``python FILE [ARGS...]`` (or ``FILE [ARGS...]``), where FILE is a workspace,
Unity Catalog volume or cloud storage path the cluster can read; ``--image`` runs the cluster on that
Databricks Container Services image. The cluster is the lease's (GPU node type, GPU ML runtime, workers,
from :meth:`DatabricksBackend.realize`), its Spark environment carries the lease's environment, and its
``custom_tags`` carry lease id, request id, subject and attempt. The run is submitted with an idempotency
token per lease and attempt, so a retried submit never starts a second run.

The SDK retries 429 and 503 itself; on top, 429/500/503 and timeouts are retried with exponential backoff
(tenacity), and other refusals (401, 403, 400) raise :class:`~respools.backends.jobs.JobError` with the
workspace's own message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from databricks.sdk import WorkspaceClient
from databricks.sdk import errors as dbx_errors
from databricks.sdk.errors.base import DatabricksError
from databricks.sdk.service import compute, jobs

from respools.backends.jobs import JobError, JobLaunch, JobPhase, JobRunner, JobStatus, provider_retrying
from respools.backends.protocol import BackendError

T = TypeVar("T")
Life = jobs.RunLifeCycleState
Result = jobs.RunResultState

TASK_KEY = "respools_step"
_WAITING = {Life.QUEUED, Life.PENDING, Life.BLOCKED, Life.WAITING_FOR_RETRY}
_ENDED = {Life.TERMINATED, Life.SKIPPED, Life.INTERNAL_ERROR}
_SUCCEEDED = {Result.SUCCESS, Result.SUCCESS_WITH_FAILURES}
_CANCELLED = {Result.CANCELED, Result.UPSTREAM_CANCELED}
TRANSIENT = (
    dbx_errors.TooManyRequests,
    dbx_errors.RequestLimitExceeded,
    dbx_errors.InternalError,
    dbx_errors.TemporarilyUnavailable,
    dbx_errors.DeadlineExceeded,
)


def tag_key(label: str) -> str:
    """``respools-lease-id`` as a cluster tag key (``respools_lease_id``, the spelling :mod:`spec` uses)."""
    return label.replace("-", "_")


def python_file_task(command: list[str]) -> jobs.SparkPythonTask:
    """``python FILE ARGS...`` or ``FILE ARGS...`` as the Python file task Databricks runs."""
    argv = command[1:] if command and command[0] in ("python", "python3") else command
    if not argv or not argv[0].endswith(".py"):
        raise BackendError(
            "a Databricks run is a Python file task: give `-- python /Workspace/path/train.py [args]` "
            "(a workspace, volume or cloud storage path the cluster can read)"
        )
    return jobs.SparkPythonTask(python_file=argv[0], parameters=argv[1:] or None)


class DatabricksJobRunner(JobRunner):
    """One-time runs in the pool's workspace. ``job_cluster`` gives the lease's job cluster (the backend's
    realization) as the Jobs API's JSON."""

    def __init__(
        self,
        workspace: WorkspaceClient,
        job_cluster: Callable[[JobLaunch], dict[str, Any]],
        *,
        attempts: int = 6,
        backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
    ) -> None:
        self._workspace = workspace
        self._job_cluster = job_cluster
        self._retrying = provider_retrying(
            TRANSIENT, attempts=attempts, backoff_s=backoff_s, max_backoff_s=max_backoff_s
        )

    def submit(self, launch: JobLaunch) -> JobStatus:
        cluster = jobs.JobCluster.from_dict(self._job_cluster(launch)).new_cluster
        if cluster is None:
            raise BackendError("the lease's realization has no job cluster")
        cluster.custom_tags = {**(cluster.custom_tags or {}), **run_tags(launch)}
        cluster.spark_env_vars = {**(cluster.spark_env_vars or {}), **launch.env}
        if launch.image:
            cluster.docker_image = compute.DockerImage(url=launch.image)
        task = jobs.SubmitTask(
            task_key=TASK_KEY, new_cluster=cluster, spark_python_task=python_file_task(list(launch.command))
        )
        waiter = self._call(
            "submit",
            lambda: self._workspace.jobs.submit(
                run_name=_run_name(launch), tasks=[task], idempotency_token=_run_name(launch)
            ),
        )
        run_id = waiter.run_id
        if run_id is None:
            raise JobError("Databricks runs/submit answered without a run_id")
        return self.status(str(run_id))

    def find(self, launch: JobLaunch) -> JobStatus | None:
        name, tags = _run_name(launch), run_tags(launch)
        runs = self._call(
            "list",
            lambda: list(self._workspace.jobs.list_runs(run_type=jobs.RunType.SUBMIT_RUN, expand_tasks=True)),
        )
        for run in runs:
            clusters = [task.new_cluster for task in run.tasks or [] if task.new_cluster is not None]
            tagged = any(
                (cluster.custom_tags or {}).get(key) == value for cluster in clusters for key, value in tags.items()
            )
            if run.run_name == name and tagged and run.run_id is not None:
                return self.status(str(run.run_id))
        return None

    def status(self, job_id: str) -> JobStatus:
        run = self._call("get", lambda: self._workspace.jobs.get_run(int(job_id)))
        state = run.state or jobs.RunState()
        life, result = state.life_cycle_state, state.result_state
        provider = f"{life.value if life else 'UNKNOWN'}" + (f"/{result.value}" if result else "")
        return JobStatus(
            job_id=job_id, phase=_phase(life, result), provider_state=provider, message=state.state_message or ""
        )

    def cancel(self, job_id: str) -> None:
        self._call("cancel", lambda: self._workspace.jobs.cancel_run(int(job_id)))

    def _call(self, what: str, call: Callable[[], T]) -> T:
        try:
            return self._retrying(call)
        except DatabricksError as exc:
            raise JobError(f"Databricks runs/{what}: {exc.error_code or type(exc).__name__}: {exc}") from exc


def _phase(life: Life | None, result: Result | None) -> JobPhase:
    if life is None or life in _WAITING:
        return JobPhase.QUEUED
    if life == Life.RUNNING:
        return JobPhase.RUNNING
    if life == Life.TERMINATING:
        return JobPhase.CANCELLING
    if life == Life.INTERNAL_ERROR or result is None:
        return JobPhase.FAILED
    if result in _SUCCEEDED:
        return JobPhase.SUCCEEDED
    return JobPhase.CANCELLED if result in _CANCELLED else JobPhase.FAILED


def _run_name(launch: JobLaunch) -> str:
    return f"respools-{launch.lease.id}-{launch.attempt}"[:64]


def run_tags(launch: JobLaunch) -> dict[str, str]:
    """The launch's identifying labels as cluster tags (lease, request, subject, attempt)."""
    return {tag_key(key): value for key, value in launch.labels().items()}
