"""Real server processes for the tests, with the settings tests want (small database pools, so that
several replicas stay within PostgreSQL's connection limit)."""

from __future__ import annotations

from pathlib import Path

from respools.server.process import ServerProcess, free_port

__all__ = ["ServerProcess", "start_server", "wait_ready"]

TEST_SETTINGS = {"RESPOOLS_DB_POOL_SIZE": "4", "RESPOOLS_DB_MAX_OVERFLOW": "8"}


def start_server(database_url: str, admin_token: str, log_dir: Path, **env: str) -> ServerProcess:
    """Launched but not yet ready, so that several replicas start side by side; see :func:`wait_ready`."""
    port = free_port()
    server = ServerProcess(
        database_url, admin_token, log_dir / f"server-{port}.log", port=port, env=TEST_SETTINGS | env
    )
    return server.start(wait=False)


def wait_ready(server: ServerProcess, timeout: float = 60.0) -> None:
    server.wait_ready(timeout)
