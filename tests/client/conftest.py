"""Fixtures of the client tests: one real server process for the session, and per test a fresh pool,
subject, policy and subject token (a :class:`World`), so tests sharing the server stay apart. Pools get
short TTLs and grace periods per test; the machine is shared, so nothing here waits on defaults."""

from __future__ import annotations

import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from respools.backends import registry
from respools.client import Client
from respools.server.process import ServerProcess
from tests.client.server import ADMIN_TOKEN, client_test_server

HOST = "gpu-node-a"
"""This test process's host name in inventories (``RESPOOLS_HOST_NAME``)."""


@pytest.fixture(scope="session")
def server() -> Iterator[ServerProcess]:
    with tempfile.TemporaryDirectory(prefix="respools-client-") as tmp:
        process = client_test_server(Path(tmp))
        process.start()
        try:
            yield process
        finally:
            process.stop()


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No ambient configuration; this host is ``gpu-node-a`` with its own holder directory, no MPS."""
    for name in ("RESPOOLS_URL", "RESPOOLS_TOKEN", "RESPOOLS_CONFIG", "RESPOOLS_TIMEOUT", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RESPOOLS_HOST_NAME", HOST)
    monkeypatch.setenv("RESPOOLS_RUN_DIR", str(tmp_path / "holders"))
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path / "no-mps"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    registry.clear_cache()


@pytest.fixture
def admin(server: ServerProcess) -> Iterator[Client]:
    with Client(server.url, ADMIN_TOKEN) as client:
        yield client


@dataclass
class World:
    pool: str
    subject: str
    token: str
    client: Client
    admin: Client

    def token_for(self, name: str, *, reserved: dict[str, float] | None = None, priority: int = 10) -> Client:
        """Another subject with a policy on this pool, and a client with its token."""
        subject = f"{name}-{self.pool.removeprefix('pool-')}"
        self.admin.put(f"/v1/subjects/{subject}", {"name": subject})
        policy = {"subject": subject, "pool": self.pool, "reserved": reserved or {}, "priority": priority}
        self.admin.post("/v1/policies", policy)
        token = self.admin.post("/v1/tokens", {"role": "subject", "subject": subject})["token"]
        return Client(self.admin.url, token)


WorldFactory = Callable[..., World]


def gpu(uuid_: str, index: int) -> dict[str, Any]:
    return {"uuid": uuid_, "index": index, "model": "NVIDIA A100-SXM4-80GB", "memory_mb": 81920}


@pytest.fixture
def world(admin: Client) -> Iterator[WorldFactory]:
    """``world(capacity={"gpu": 1}, grace_s=2, ttl_s=5, gpus=0)``: a fresh pool (with ``gpus`` GPUs on
    host ``gpu-node-a`` reported instead of a plain capacity) and one subject whose reserved share is the
    whole pool, at policy priority 10."""
    made: list[Client] = []

    def make(
        capacity: dict[str, float] | None = None,
        *,
        grace_s: float = 5.0,
        ttl_s: float = 10.0,
        gpus: int = 0,
        init_timeout_s: float = 30.0,
    ) -> World:
        suffix = uuid.uuid4().hex[:8]
        pool, subject = f"pool-{suffix}", f"team-{suffix}"
        spec = {
            "name": pool,
            "capacity": {} if gpus else (capacity or {"gpu": 1}),
            "preemption_grace_s": grace_s,
            "lease_ttl_s": ttl_s,
            "init_timeout_s": init_timeout_s,
        }
        admin.put(f"/v1/pools/{pool}", spec)
        if gpus:
            host = {"name": HOST, "gpus": [gpu(f"GPU-{suffix}-{i}", i) for i in range(gpus)]}
            admin.put(f"/v1/pools/{pool}/hosts/{HOST}", host, params={"ttl_s": 600})
        admin.put(f"/v1/subjects/{subject}", {"name": subject})
        reserved = {"gpu": gpus} if gpus else dict(capacity or {"gpu": 1})
        admin.post("/v1/policies", {"subject": subject, "pool": pool, "reserved": reserved, "priority": 10})
        token = admin.post("/v1/tokens", {"role": "subject", "subject": subject})["token"]
        client = Client(admin.url, token)
        made.append(client)
        return World(pool, subject, token, client, admin)

    yield make
    for client in made:
        client.close()


def wait_for(condition: Callable[[], Any], timeout: float = 10.0, interval: float = 0.05) -> Any:
    """Poll until ``condition()`` is truthy; its value, or an AssertionError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(interval)
