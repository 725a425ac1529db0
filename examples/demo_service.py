"""The demo's own pool service: ``respools server`` on an SQLite file in a temporary directory, on a free
loopback port, with an admin token made up for the occasion. Stopped (SIGTERM, then SIGKILL) however the
demo ends, so a fresh machine is left as it was found."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from respools.client import Client, RespoolsError, RetryPolicy

READY_TIMEOUT_S = 60.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Service:
    process: subprocess.Popen[bytes]
    url: str
    admin_token: str
    database: Path
    log: Path

    @classmethod
    def start(cls, directory: Path, port: int | None = None) -> Service:
        port = port or free_port()
        database = directory / "respools.db"
        log = directory / "server.log"
        token = "rp_demo_" + secrets.token_urlsafe(24)
        env = os.environ | {
            "RESPOOLS_DATABASE_URL": f"sqlite:///{database}",
            "RESPOOLS_ADMIN_TOKEN": token,
            "RESPOOLS_TICK_S": "0.2",  # a snappy reconciler: the demo's steps last seconds, not hours
            "RESPOOLS_LOG_JSON": "false",
        }
        command = [sys.executable, "-c", "from respools.cli import app; app()", "server", "--port", str(port)]
        with log.open("wb") as out:
            process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
        service = cls(process, f"http://127.0.0.1:{port}", token, database, log)
        try:
            service.wait_ready()
        except BaseException:
            service.stop()
            raise
        return service

    def wait_ready(self) -> None:
        probe = Client(self.url, self.admin_token, retry=RetryPolicy(attempts=1), timeout=2.0)
        deadline = time.monotonic() + READY_TIMEOUT_S
        try:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(f"the service exited during start:\n{self.log_tail()}")
                try:
                    probe.get("/readyz")
                    return
                except RespoolsError:
                    time.sleep(0.2)
        finally:
            probe.close()
        raise TimeoutError(f"the service was not ready within {READY_TIMEOUT_S:.0f} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
