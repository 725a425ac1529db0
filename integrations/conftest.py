"""Fixtures shared by the integrations' tests whose job runners hold leases from a real respools service
(the Vertex and Databricks runners): the service, its admin, and a fresh pool per test.

The ZenML tests define a ``respools_server`` of their own (a server for pipelines in subprocesses); these
fixtures are named apart so the two never meet.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from respools.client import Client
from respools.server.process import ServerProcess

ADMIN_TOKEN = "rp_runner_test_admin"
StackPool = Callable[[str, dict[str, Any]], tuple[str, Client]]


@pytest.fixture(scope="session")
def runner_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A real respools service (SQLite) that the runner tests hold leases from."""
    directory = tmp_path_factory.mktemp("respools-runners")
    server = ServerProcess(
        database_url=f"sqlite:///{directory / 'respools.db'}",
        admin_token=ADMIN_TOKEN,
        log=directory / "server.log",
        env={"RESPOOLS_TICK_S": "0.1", "RESPOOLS_MAX_WAIT_S": "30", "RESPOOLS_RUN_DIR": str(directory / "run")},
    ).start()
    yield server
    server.stop()


@pytest.fixture
def admin(runner_service: ServerProcess) -> Iterator[Client]:
    with Client(runner_service.url, ADMIN_TOKEN) as client:
        yield client


@pytest.fixture
def stack_pool(admin: Client) -> Iterator[StackPool]:
    """``stack_pool(stack, settings)``: a fresh pool of 8 GPUs on ``stack`` with ``settings`` (1 s grace, 10 s
    TTL), and a client of a subject whose reserved share is the whole pool."""
    made: list[Client] = []

    def make(stack: str, settings: dict[str, Any]) -> tuple[str, Client]:
        suffix = uuid.uuid4().hex[:8]
        pool, subject = f"{stack}-{suffix}", f"team-{suffix}"
        admin.put(
            f"/v1/pools/{pool}",
            {
                "name": pool,
                "stack": stack,
                "capacity": {"gpu": 8},
                "preemption_grace_s": 1.0,
                "lease_ttl_s": 10.0,
                "settings": settings,
            },
        )
        admin.put(f"/v1/subjects/{subject}", {"name": subject})
        admin.post("/v1/policies", {"subject": subject, "pool": pool, "reserved": {"gpu": 8}, "priority": 10})
        token = admin.post("/v1/tokens", {"role": "subject", "subject": subject})["token"]
        client = Client(admin.url, token)
        made.append(client)
        return pool, client

    yield make
    for client in made:
        client.close()
