"""Fixtures for the Databricks backend's tests.

``workspace_api`` runs a kmock HTTP server on a free loopback port in a background thread, standing in for
a workspace's REST API: the real ``WorkspaceClient`` (token auth) talks HTTP to it, and the test reads back
what it sent. Paths the test does not serve answer 404, as a workspace does for unknown endpoints.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import kmock
import pytest
from databricks.sdk import WorkspaceClient
from kmock_thread import serve_in_thread
from respools_databricks import DatabricksBackend
from respools_databricks.settings import DatabricksSettings

from respools.client import Client
from respools.model import Lease, PoolSpec

if TYPE_CHECKING:
    from integrations.conftest import StackPool


@pytest.fixture
def workspace_api() -> Iterator[kmock.RawHandler]:
    yield from serve_in_thread(kmock.RawHandler, _unknown_paths_404)


def _unknown_paths_404(handler: kmock.RawHandler) -> None:
    handler.fallback << 404


@pytest.fixture
def backend(workspace_api: kmock.RawHandler) -> DatabricksBackend:
    """The backend, its workspace client pointed at the stand-in."""
    host = str(workspace_api.url).rstrip("/")

    def workspace(settings: DatabricksSettings) -> WorkspaceClient:
        return WorkspaceClient(host=host, token="test-token")

    return DatabricksBackend(workspace_factory=workspace)


@pytest.fixture
def make_lease() -> Callable[..., Lease]:
    """``make_lease({"gpu": 4})``: a granted lease in wire form (GPUs as decimals)."""

    def make(resources: dict[str, float], **fields: Any) -> Lease:
        now = datetime.now(UTC)
        return Lease.model_validate(
            {
                "id": "lease_7c1d",
                "request_id": "req_1",
                "subject": "team-a",
                "pool": "dbx",
                "stack": "databricks",
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
    """``make_pool(settings={...})``: a databricks pool with AWS g5 node types and an LTS GPU ML runtime."""

    def make(**fields: Any) -> PoolSpec:
        settings = {
            "spark_version": "15.4.x-gpu-ml-scala2.12",
            "node_types": {"1": "g5.xlarge", "4": "g5.12xlarge", "8": "g5.48xlarge"},
        }
        return PoolSpec.model_validate(
            {"name": "dbx", "stack": "databricks", **fields, "settings": settings | fields.get("settings", {})}
        )

    return make


@pytest.fixture
def databricks_pool(stack_pool: StackPool) -> Callable[[str], tuple[str, Client]]:
    """``databricks_pool(host)``: a fresh databricks pool of 8 GPUs (g5 node types) in the workspace at
    ``host``, and a client of a subject whose reserved share is the whole pool."""

    def make(host: str) -> tuple[str, Client]:
        settings = {"spark_version": "15.4.x-gpu-ml-scala2.12", "node_types": {"1": "g5.xlarge", "4": "g5.12xlarge"}}
        return stack_pool("databricks", settings | {"host": host})

    return make
