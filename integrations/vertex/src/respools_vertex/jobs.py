"""Stopping a lease's workload on Vertex: cancel the custom jobs that carry its label.

Jobs are listed with a server-side label filter and cancelled one by one; jobs already finished or being
cancelled are left alone, so ``stop`` can run twice.
"""

from __future__ import annotations

from collections.abc import Callable

from google.auth.credentials import AnonymousCredentials
from google.cloud import aiplatform_v1

from respools_vertex.settings import VertexSettings
from respools_vertex.spec import LEASE_LABEL

JobClientFactory = Callable[[VertexSettings], aiplatform_v1.JobServiceClient]

_DONE = frozenset(
    {
        aiplatform_v1.JobState.JOB_STATE_SUCCEEDED,
        aiplatform_v1.JobState.JOB_STATE_PARTIALLY_SUCCEEDED,
        aiplatform_v1.JobState.JOB_STATE_FAILED,
        aiplatform_v1.JobState.JOB_STATE_CANCELLING,
        aiplatform_v1.JobState.JOB_STATE_CANCELLED,
        aiplatform_v1.JobState.JOB_STATE_EXPIRED,
    }
)


_TERMINAL = _DONE - {aiplatform_v1.JobState.JOB_STATE_CANCELLING}
"""States in which a job holds no machine any more: a cancelling job may still be running."""


def default_job_client(settings: VertexSettings) -> aiplatform_v1.JobServiceClient:
    """The regional endpoint (or ``settings.api_endpoint``) with the ambient Google credentials; an
    ``http://`` endpoint is a local emulator, called over REST without credentials."""
    endpoint = settings.api_endpoint or f"{settings.region}-aiplatform.googleapis.com"
    if endpoint.startswith("http://"):
        return aiplatform_v1.JobServiceClient(
            transport="rest",
            credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]  # google-auth leaves it unannotated
            client_options={"api_endpoint": endpoint},
        )
    return aiplatform_v1.JobServiceClient(client_options={"api_endpoint": endpoint})


def location(settings: VertexSettings) -> str:
    return f"projects/{settings.project}/locations/{settings.region}"


def list_request(settings: VertexSettings, label_value: str) -> aiplatform_v1.ListCustomJobsRequest:
    return aiplatform_v1.ListCustomJobsRequest(
        parent=location(settings), filter=f'labels.{LEASE_LABEL}="{label_value}"'
    )


def cancel_lease_jobs(client: aiplatform_v1.JobServiceClient, settings: VertexSettings, label_value: str) -> list[str]:
    """Cancel the lease's running or queued jobs; their resource names."""
    cancelled = []
    for job in client.list_custom_jobs(request=list_request(settings, label_value)):
        # The filter selected them; the check guards against cancelling another lease's job if it did not.
        if job.labels.get(LEASE_LABEL) != label_value or job.state in _DONE:
            continue
        client.cancel_custom_job(request=aiplatform_v1.CancelCustomJobRequest(name=job.name))
        cancelled.append(job.name)
    return cancelled


def unfinished_lease_jobs(
    client: aiplatform_v1.JobServiceClient, settings: VertexSettings, label_value: str
) -> list[str]:
    """Resource names of the lease's jobs not yet in a terminal state (cancelling ones included)."""
    return [
        job.name
        for job in client.list_custom_jobs(request=list_request(settings, label_value))
        if job.labels.get(LEASE_LABEL) == label_value and job.state not in _TERMINAL
    ]
