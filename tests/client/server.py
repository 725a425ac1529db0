"""A real ``respools server`` process for the client tests, on a port that survives a restart (the restart
test brings a new process up where the client already points).

Its holder directory (``RESPOOLS_RUN_DIR``) is its own: the server's stopper signals the registered
holders of leases revoked at their deadline, and the holders the tests register are the test process
itself or children the tests watch; only the host agent of a real deployment should stop those."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

import respools

SRC = str(Path(respools.__file__).resolve().parent.parent)
ADMIN_TOKEN = "rp_client_test_admin"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Server:
    directory: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def database_url(self) -> str:
        return f"sqlite:///{self.directory / 'respools.db'}"

    @property
    def log(self) -> Path:
        return self.directory / "server.log"

    def start(self, timeout: float = 60.0) -> None:
        self.starts += 1
        env = os.environ | {
            "PYTHONPATH": os.pathsep.join(filter(None, [SRC, os.environ.get("PYTHONPATH")])),
            "RESPOOLS_DATABASE_URL": self.database_url,
            "RESPOOLS_ADMIN_TOKEN": ADMIN_TOKEN,
            "RESPOOLS_TICK_S": "0.1",
            "RESPOOLS_ELECTION_INTERVAL_S": "0.2",
            "RESPOOLS_MAX_WAIT_S": "30",
            "RESPOOLS_RUN_DIR": str(self.directory / "server-holders"),
            "RESPOOLS_DB_POOL_SIZE": "8",
        }
        command = [sys.executable, "-c", "from respools.cli import app; app()", "server", "--port", str(self.port)]
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                raise RuntimeError(f"server exited early:\n{self.log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"server on port {self.port} not ready:\n{self.log.read_text()[-3000:]}")

    def kill(self) -> None:
        """SIGKILL, as when the machine dies: no clean shutdown."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
