"""A lease as a Vertex AI custom job: submit, find by label, watch, cancel through ``JobServiceClient``.

Convention (what Vertex users expect): a *custom container* job. ``--image`` is the container's
``image_uri`` and the command after ``--`` its ``command`` (it replaces the image's entrypoint); the chief
worker pool runs on the lease's machine (machine type, accelerator type and count, Spot where the pool
says, from :func:`respools_vertex.spec.custom_job_fragment`) and its container gets the lease's
environment. Labels carry the lease id, request id, subject and attempt, so a restarted runner finds the
job of its attempt again.

Transient API errors (429, 500, 502, 503, 504) are retried with exponential backoff (tenacity); the
others (401, 403, 400, 404) and exhausted retries raise :class:`~respools.backends.jobs.JobError` with
Google's own message.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar

from google.api_core import exceptions as google_errors
from google.auth import exceptions as auth_errors
from google.cloud import aiplatform_v1

from respools.backends.jobs import JobError, JobLaunch, JobPhase, JobRunner, JobStatus, provider_retrying
from respools.backends.protocol import BackendError
from respools_vertex.jobs import location
from respools_vertex.settings import VertexSettings
from respools_vertex.spec import apply_to_custom_job

T = TypeVar("T")
JobState = aiplatform_v1.JobState

PHASES: dict[int, JobPhase] = {
    JobState.JOB_STATE_UNSPECIFIED: JobPhase.QUEUED,
    JobState.JOB_STATE_QUEUED: JobPhase.QUEUED,
    JobState.JOB_STATE_PENDING: JobPhase.QUEUED,
    JobState.JOB_STATE_RUNNING: JobPhase.RUNNING,
    JobState.JOB_STATE_UPDATING: JobPhase.RUNNING,
    JobState.JOB_STATE_PAUSED: JobPhase.RUNNING,
    JobState.JOB_STATE_SUCCEEDED: JobPhase.SUCCEEDED,
    JobState.JOB_STATE_PARTIALLY_SUCCEEDED: JobPhase.SUCCEEDED,
    JobState.JOB_STATE_FAILED: JobPhase.FAILED,
    JobState.JOB_STATE_EXPIRED: JobPhase.FAILED,
    JobState.JOB_STATE_CANCELLING: JobPhase.CANCELLING,
    JobState.JOB_STATE_CANCELLED: JobPhase.CANCELLED,
}
TRANSIENT = (
    google_errors.TooManyRequests,
    google_errors.InternalServerError,
    google_errors.BadGateway,
    google_errors.ServiceUnavailable,
    google_errors.GatewayTimeout,
)
_LABEL_CHARS = re.compile(r"[^a-z0-9_-]")


def label_value(value: str) -> str:
    """Any string as a Vertex label value: lowercase, other characters as '-', at most 63."""
    return _LABEL_CHARS.sub("-", value.lower())[:63]


class VertexJobRunner(JobRunner):
    """Custom jobs in the pool's project and region. ``fragment`` gives the lease's ``CustomJob`` part
    (the backend's realization), so the machine spec is decided in one place."""

    def __init__(
        self,
        client: aiplatform_v1.JobServiceClient,
        settings: VertexSettings,
        fragment: Callable[[JobLaunch], dict[str, Any]],
        *,
        attempts: int = 6,
        backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
    ) -> None:
        self._client = client
        self._parent = location(settings)
        self._fragment = fragment
        self._retrying = provider_retrying(
            TRANSIENT, attempts=attempts, backoff_s=backoff_s, max_backoff_s=max_backoff_s
        )

    def submit(self, launch: JobLaunch) -> JobStatus:
        if not launch.image:
            raise BackendError("a Vertex AI job runs a custom container: give its image with --image")
        job = aiplatform_v1.CustomJob(
            display_name=f"respools-{launch.lease.id}-{launch.attempt}",
            job_spec=aiplatform_v1.CustomJobSpec(
                worker_pool_specs=[
                    aiplatform_v1.WorkerPoolSpec(
                        container_spec=aiplatform_v1.ContainerSpec(
                            image_uri=launch.image, command=list(launch.command)
                        ),
                        replica_count=1,
                    )
                ]
            ),
        )
        job = apply_to_custom_job(job, self._fragment(launch), launch.env)
        for key, value in launch.labels().items():
            job.labels[key] = label_value(value)
        request = aiplatform_v1.CreateCustomJobRequest(parent=self._parent, custom_job=job)
        created = self._call("create", lambda: self._client.create_custom_job(request=request, retry=None))
        return _status(created)

    def find(self, launch: JobLaunch) -> JobStatus | None:
        labels = launch.labels()
        wanted = {key: label_value(labels[key]) for key in ("respools-lease-id", "respools-attempt")}
        request = aiplatform_v1.ListCustomJobsRequest(
            parent=self._parent, filter=" AND ".join(f'labels.{key}="{value}"' for key, value in wanted.items())
        )
        found = self._call("list", lambda: list(self._client.list_custom_jobs(request=request, retry=None)))
        mine = [job for job in found if all(job.labels.get(key) == value for key, value in wanted.items())]
        return _status(mine[0]) if mine else None

    def status(self, job_id: str) -> JobStatus:
        return _status(self._call("get", lambda: self._client.get_custom_job(name=job_id, retry=None)))

    def cancel(self, job_id: str) -> None:
        self._call("cancel", lambda: self._client.cancel_custom_job(name=job_id, retry=None))

    def _call(self, what: str, call: Callable[[], T]) -> T:
        try:
            return self._retrying(call)
        except google_errors.GoogleAPICallError as exc:
            raise JobError(f"Vertex AI {what} custom job: {exc.code} {exc.message}") from exc
        except auth_errors.GoogleAuthError as exc:
            raise JobError(f"Vertex AI {what} custom job: not authenticated ({exc})") from exc


def _status(job: aiplatform_v1.CustomJob) -> JobStatus:
    state = JobState(job.state)
    return JobStatus(
        job_id=job.name,
        phase=PHASES[int(state)],
        provider_state=state.name,
        message=job.error.message if job.error else "",
    )
