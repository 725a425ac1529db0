"""The demo's own pool service: ``respools server`` on an SQLite file in a temporary directory, on a free
loopback port, with an admin token made up for the occasion. Stopped (SIGTERM, then SIGKILL) however the
demo ends, so a fresh machine is left as it was found."""

from __future__ import annotations

import secrets
from pathlib import Path

from respools.server.process import ServerProcess, free_port

READY_TIMEOUT_S = 60.0


def start_service(directory: Path, port: int | None = None) -> ServerProcess:
    return ServerProcess(
        database_url=f"sqlite:///{directory / 'respools.db'}",
        admin_token="rp_demo_" + secrets.token_urlsafe(24),
        log=directory / "server.log",
        port=port or free_port(),
        env={"RESPOOLS_LOG_JSON": "false"},
    ).start(timeout=READY_TIMEOUT_S)
