"""stop through the real JobServiceClient (REST transport), over HTTP, against a kmock stand-in for Vertex."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import kmock
import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import aiplatform_v1
from respools_vertex import VertexBackend, VertexSettings

from respools.backends.protocol import BackendError
from respools.model import Lease, PoolSpec

MakeLease = Callable[..., Lease]
MakePool = Callable[..., PoolSpec]

LOCATION = "projects/ml-prod/locations/us-central1"


def job(number: int, state: str, lease: str) -> dict[str, Any]:
    return {"name": f"{LOCATION}/customJobs/{number}", "state": state, "labels": {"respools-lease-id": lease}}


def backend_against(google_api: kmock.RawHandler) -> VertexBackend:
    def job_client(settings: VertexSettings) -> aiplatform_v1.JobServiceClient:
        return aiplatform_v1.JobServiceClient(
            transport="rest",
            credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]  # google-auth leaves it unannotated
            client_options={"api_endpoint": str(google_api.url).rstrip("/")},
        )

    return VertexBackend(job_client_factory=job_client)


def test_stop_cancels_the_leases_unfinished_jobs(
    google_api: kmock.RawHandler, make_lease: MakeLease, make_pool: MakePool
) -> None:
    jobs = [
        job(1, "JOB_STATE_RUNNING", "lease_1f2e"),
        job(2, "JOB_STATE_QUEUED", "lease_1f2e"),
        job(3, "JOB_STATE_SUCCEEDED", "lease_1f2e"),
        job(4, "JOB_STATE_RUNNING", "lease_other"),
    ]
    google_api[f"get /v1/{LOCATION}/customJobs"] << {"customJobs": jobs}
    google_api["post"] << {}

    backend_against(google_api).stop(make_lease({"gpu": 2}), make_pool())

    listing, *cancels = list(google_api)
    assert listing.params["filter"] == 'labels.respools-lease-id="lease_1f2e"'
    assert [str(request.url.path) for request in cancels] == [
        f"/v1/{LOCATION}/customJobs/1:cancel",
        f"/v1/{LOCATION}/customJobs/2:cancel",
    ]
    assert all(json.loads(request.body or b"{}") == {} for request in cancels)


@pytest.mark.parametrize(
    ("states", "confirmed"),
    [
        (["JOB_STATE_CANCELLED", "JOB_STATE_SUCCEEDED"], True),
        (["JOB_STATE_CANCELLED", "JOB_STATE_CANCELLING"], False),
        (["JOB_STATE_RUNNING"], False),
        ([], True),
    ],
)
def test_a_stop_is_confirmed_once_every_job_of_the_lease_is_terminal(
    google_api: kmock.RawHandler, make_lease: MakeLease, make_pool: MakePool, states: list[str], confirmed: bool
) -> None:
    jobs = [job(n, state, "lease_1f2e") for n, state in enumerate(states)] + [job(9, "JOB_STATE_RUNNING", "lease_x")]
    google_api[f"get /v1/{LOCATION}/customJobs"] << {"customJobs": jobs}

    evidence = backend_against(google_api).confirm_stopped(make_lease({"gpu": 2}), make_pool())

    assert (evidence is not None) is confirmed
    (listing,) = list(google_api)
    assert listing.params["filter"] == 'labels.respools-lease-id="lease_1f2e"'


def test_stop_needs_the_project(make_lease: MakeLease, make_pool: MakePool) -> None:
    with pytest.raises(BackendError, match=r"needs settings.project"):
        VertexBackend().stop(make_lease({"gpu": 1}), make_pool(settings={"project": None}))
