"""A real service process (``respools server`` on SQLite, free loopback port) and a way to run CLI
commands against it in-process with typer's runner."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from respools.cli import app
from tests.server.servers import ServerProcess, start_server, wait_ready


@dataclass
class Cli:
    """Runs ``respools …`` against one service with an admin token (or the one given)."""

    server: ServerProcess
    token: str

    @property
    def url(self) -> str:
        return self.server.url

    def run(self, *args: str, token: str | None = None, input: str | None = None, code: int | None = 0) -> Result:
        # A generous HTTP timeout: on a loaded 2-core CI machine the first apply can pass the default 10 s.
        env = {"RESPOOLS_URL": self.url, "RESPOOLS_TOKEN": token or self.token, "COLUMNS": "200", "NO_COLOR": "1"}
        env["RESPOOLS_TIMEOUT"] = "60"
        result = CliRunner().invoke(app, list(args), env=env, input=input)
        if code is not None:
            assert result.exit_code == code, (
                f"respools {' '.join(args)} exited {result.exit_code}\nstdout:\n{result.stdout}\n"
                f"stderr:\n{result.stderr}\n{result.exception!r}"
            )
        return result

    def json(self, *args: str, token: str | None = None) -> Any:
        return json.loads(self.run(*args, "--output", "json", token=token).stdout)


ServiceFactory = Callable[[], Cli]


@pytest.fixture(scope="module")
def start_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceFactory]:
    """Starts services on demand (each on its own SQLite file) and stops them all with the module."""
    started: list[ServerProcess] = []

    def start() -> Cli:
        directory = Path(tmp_path_factory.mktemp("service"))
        token = "rp_test_" + secrets.token_hex(8)
        server = start_server(f"sqlite:///{directory / 'respools.db'}", token, directory)
        started.append(server)
        wait_ready(server)
        return Cli(server, token)

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="module")
def cli(start_service: ServiceFactory) -> Cli:
    """One service for a whole test module; tests keep apart by the names they use."""
    return start_service()
