"""Fixtures for the Vertex backend's tests.

``google_api`` runs a kmock HTTP server on a free loopback port in a background thread, standing in for
Google's REST endpoints: the real ``JobServiceClient`` (REST transport) and an authorized ``requests``
session talk HTTP to it, and the test reads back what they sent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import kmock
import pytest
from kmock_thread import serve_in_thread

from respools.client import Client
from respools.model import Lease, PoolSpec

if TYPE_CHECKING:
    from integrations.conftest import StackPool


@pytest.fixture
def google_api() -> Iterator[kmock.RawHandler]:
    yield from serve_in_thread(kmock.RawHandler)


@pytest.fixture
def make_lease() -> Callable[..., Lease]:
    """``make_lease({"gpu": 2})``: a granted lease in wire form (GPUs as decimals)."""

    def make(resources: dict[str, float], **fields: Any) -> Lease:
        now = datetime.now(UTC)
        return Lease.model_validate(
            {
                "id": "lease_1f2e",
                "request_id": "req_1",
                "subject": "team-a",
                "pool": "vertex-a100",
                "stack": "vertex",
                "resources": resources,
                "state": "granted",
                "preemptible": True,
                "granted_at": now,
                "expires_at": now + timedelta(minutes=1),
                **fields,
            }
        )

    return make


@pytest.fixture
def make_pool() -> Callable[..., PoolSpec]:
    """``make_pool(settings={...})``: a vertex pool of A100 40GB in project ``ml-prod``."""

    def make(**fields: Any) -> PoolSpec:
        settings = {"project": "ml-prod", "region": "us-central1", "accelerator_type": "NVIDIA_TESLA_A100"}
        return PoolSpec.model_validate(
            {"name": "vertex-a100", "stack": "vertex", **fields, "settings": settings | fields.get("settings", {})}
        )

    return make


@pytest.fixture
def vertex_pool(stack_pool: StackPool) -> Callable[[str], tuple[str, Client]]:
    """``vertex_pool(endpoint)``: a fresh vertex pool of 8 A100s on the fake at ``endpoint``, and a client
    of a subject whose reserved share is the whole pool."""

    def make(endpoint: str) -> tuple[str, Client]:
        settings = {"project": "ml-prod", "accelerator_type": "NVIDIA_TESLA_A100", "gpu_quota": 8}
        return stack_pool("vertex", settings | {"api_endpoint": endpoint})

    return make
