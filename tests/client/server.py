"""A real ``respools server`` process for the client tests, on a port that survives a restart (the restart
test brings a new process up where the client already points).

Its holder directory (``RESPOOLS_RUN_DIR``) is its own: the server's stopper signals the registered
holders of leases revoked at their deadline, and the holders the tests register are the test process
itself or children the tests watch; only the host agent of a real deployment should stop those."""

from __future__ import annotations

from pathlib import Path

import respools
from respools.server.process import ServerProcess

SRC = str(Path(respools.__file__).resolve().parent.parent)
ADMIN_TOKEN = "rp_client_test_admin"


def client_test_server(directory: Path) -> ServerProcess:
    """Not started yet; its SQLite file, log and holder directory live in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    return ServerProcess(
        database_url=f"sqlite:///{directory / 'respools.db'}",
        admin_token=ADMIN_TOKEN,
        log=directory / "server.log",
        env={
            "RESPOOLS_TICK_S": "0.1",
            "RESPOOLS_ELECTION_INTERVAL_S": "0.2",
            "RESPOOLS_MAX_WAIT_S": "30",
            "RESPOOLS_RUN_DIR": str(directory / "server-holders"),
            "RESPOOLS_DB_POOL_SIZE": "8",
        },
    )
