"""A real respools server for the ZenML tests: ``respools server`` in a subprocess on a free loopback port,
SQLite in a temporary directory, and helpers to define an isolated pool, subject and policy per test."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

ADMIN_TOKEN = "rp_zenml_test_admin"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class World:
    """One pool with one subject holding a policy on it, and that subject's token."""

    url: str
    pool: str
    subject: str
    token: str


class RespoolsServer:
    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / "respools-server.log"
        env = {
            "RESPOOLS_DATABASE_URL": f"sqlite:///{workdir / 'respools.db'}",
            "RESPOOLS_ADMIN_TOKEN": ADMIN_TOKEN,
            "RESPOOLS_TICK_S": "0.2",
            "RESPOOLS_ELECTION_INTERVAL_S": "0.3",
            "RESPOOLS_LOG_JSON": "false",
            "RESPOOLS_LOG_LEVEL": "WARNING",
            "PATH": "/usr/bin:/bin",
        }
        command = [sys.executable, "-c", "from respools.cli import app; app()", "server", "--port", str(self.port)]
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
        self.admin = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=10)

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"respools server exited early:\n{self.log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"respools server not ready:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        self.admin.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

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
