"""A real respools server for the ZenML tests: ``respools server`` in a subprocess on a free loopback port,
SQLite in a temporary directory, and helpers to define an isolated pool, subject and policy per test."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from respools.server.process import ServerProcess

ADMIN_TOKEN = "rp_zenml_test_admin"


@dataclass
class World:
    """One pool with one subject holding a policy on it, and that subject's token."""

    url: str
    pool: str
    subject: str
    token: str


class RespoolsServer:
    """The server process plus an admin HTTP client and helpers to set up isolated worlds."""

    def __init__(self, workdir: Path) -> None:
        self.process = ServerProcess(
            database_url=f"sqlite:///{workdir / 'respools.db'}",
            admin_token=ADMIN_TOKEN,
            log=workdir / "respools-server.log",
            env={"RESPOOLS_LOG_JSON": "false", "RESPOOLS_LOG_LEVEL": "WARNING"},
            inherit_env=False,  # keep the tests' ZENML_* settings out of the server
        ).start(wait=False)
        self.url = self.process.url
        self.admin = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=60)

    def wait_ready(self, timeout: float = 60.0) -> None:
        self.process.wait_ready(timeout)

    def stop(self) -> None:
        self.admin.close()
        self.process.stop()

    def ok(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.admin.request(method, path, **kwargs)
        assert response.status_code < 300, (method, path, response.status_code, response.text)
        return response.json() if response.content else None

    def world(self, capacity: dict[str, float], policy: dict[str, Any], **pool: Any) -> World:
        """A fresh pool, subject and policy (names unique per call, so tests sharing the server stay apart)."""
        suffix = uuid.uuid4().hex[:8]
        name, subject = f"pool-{suffix}", f"team-{suffix}"
        self.ok("PUT", f"/v1/pools/{name}", json={"name": name, "capacity": capacity} | pool)
        self.ok("PUT", f"/v1/subjects/{subject}", json={"name": subject})
        self.ok("POST", "/v1/policies", json={"subject": subject, "pool": name} | policy)
        token = self.ok("POST", "/v1/tokens", json={"role": "subject", "subject": subject})["token"]
        return World(url=self.url, pool=name, subject=subject, token=token)

    def leases(self, pool: str) -> list[dict[str, Any]]:
        leases: list[dict[str, Any]] = self.ok("GET", "/v1/leases", params={"pool": pool, "limit": 100})
        return leases

    def requests(self, subject: str) -> list[dict[str, Any]]:
        requests: list[dict[str, Any]] = self.ok("GET", "/v1/requests", params={"subject": subject, "limit": 100})
        return requests

    def events(self, pool: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = self.ok("GET", "/v1/events", params={"pool": pool, "limit": 1000})
        return events
