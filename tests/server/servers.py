"""Real server processes (``respools server`` under uvicorn) for multi-replica tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

import respools

SRC = str(Path(respools.__file__).resolve().parent.parent)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class ServerProcess:
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def alive(self) -> bool:
        return self.process.poll() is None

    def role(self) -> str | None:
        try:
            role: str | None = httpx.get(f"{self.url}/readyz", timeout=2).json().get("reconciler")
        except (httpx.HTTPError, ValueError):
            return None
        return role

    def kill(self) -> None:
        """SIGKILL: no clean shutdown, as when a machine dies."""
        if self.alive():
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        if self.alive():
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


def start_server(database_url: str, admin_token: str, log_dir: Path, **env: str) -> ServerProcess:
    port = free_port()
    log = log_dir / f"server-{port}.log"
    environment = (
        os.environ
        | {
            "PYTHONPATH": os.pathsep.join(filter(None, [SRC, os.environ.get("PYTHONPATH")])),
            "RESPOOLS_DATABASE_URL": database_url,
            "RESPOOLS_ADMIN_TOKEN": admin_token,
            "RESPOOLS_TICK_S": "0.2",
            "RESPOOLS_ELECTION_INTERVAL_S": "0.3",
            "RESPOOLS_DB_POOL_SIZE": "4",
            "RESPOOLS_DB_MAX_OVERFLOW": "8",
        }
        | env
    )
    command = [sys.executable, "-c", "from respools.cli import app; app()", "server", "--port", str(port)]
    with log.open("wb") as out:
        process = subprocess.Popen(command, env=environment, stdout=out, stderr=subprocess.STDOUT)
    return ServerProcess(process, port, log)


def wait_ready(server: ServerProcess, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not server.alive():
            raise RuntimeError(f"server exited early:\n{server.log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{server.url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"server on port {server.port} not ready:\n{server.log.read_text()[-3000:]}")
