"""A ``respools server`` in a child process on a loopback port.

For whatever needs a real service beside it rather than an app object in its own process: the demo,
and the tests that talk to the service over HTTP the way users do (several replicas on one database,
a server killed and restarted under a waiting client, ZenML pipelines in their own processes)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx

FAST_RECONCILER = {"RESPOOLS_TICK_S": "0.2", "RESPOOLS_ELECTION_INTERVAL_S": "0.3"}
"""Deadlines and leadership checked several times a second: for demos and tests, where steps last
seconds rather than hours."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class ServerProcess:
    """One server process; ``start()`` may be called again after ``stop()``/``kill()`` to bring a new
    process up on the same port and database, as a restarted replica would be."""

    database_url: str
    admin_token: str
    log: Path
    port: int = field(default_factory=free_port)
    env: Mapping[str, str] = field(default_factory=dict)
    """Settings on top of :data:`FAST_RECONCILER` (``RESPOOLS_*`` variables)."""
    workers: int = 1
    """uvicorn worker processes (``--workers``; above 1 on PostgreSQL only)."""
    inherit_env: bool = True
    """Whether the child sees this process's environment; off to keep a caller's settings out."""
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *, wait: bool = True, timeout: float = 60.0) -> ServerProcess:
        base = dict(os.environ) if self.inherit_env else {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        environment = (
            base
            | FAST_RECONCILER
            | {"RESPOOLS_DATABASE_URL": self.database_url, "RESPOOLS_ADMIN_TOKEN": self.admin_token}
            | dict(self.env)
        )
        command = [sys.executable, "-c", "from respools.cli import app; app()", "server", "--port", str(self.port)]
        command += ["--workers", str(self.workers)]
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(command, env=environment, stdout=out, stderr=subprocess.STDOUT)
        self.starts += 1
        if wait:
            try:
                self.wait_ready(timeout)
            except BaseException:
                self.stop()
                raise
        return self

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"respools server exited during start:\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"respools server on port {self.port} not ready within {timeout:.0f} s:\n{self.log_tail()}")

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def role(self) -> str | None:
        """``leader`` or ``follower`` as the server reports it, or None when it does not answer."""
        try:
            role: str | None = httpx.get(f"{self.url}/readyz", timeout=2).json().get("reconciler")
        except (httpx.HTTPError, ValueError):
            return None
        return role

    def kill(self) -> None:
        """SIGKILL: no clean shutdown, as when a machine dies."""
        if self.process is not None and self.alive():
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not stopped within ten seconds."""
        if self.process is not None and self.alive():
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"
