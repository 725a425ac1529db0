"""Fixtures for the ZenML integration's tests.

ZenML keeps its store and active stack under ``ZENML_CONFIG_PATH``; the tests point it at a temporary
directory *before anything imports zenml* (this module is imported before the test modules), so they never
touch a developer's ZenML setup, and run with analytics off and quiet logs. Pipelines that run for real do
so in subprocesses (:mod:`runner`), each with its own ZenML directory, against one respools server started
for the session.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from zenml_test_env import QUIET_ZENML_ENV

_ZENML_HOME = Path(tempfile.mkdtemp(prefix="respools-zenml-tests-"))
os.environ.update(QUIET_ZENML_ENV | {"ZENML_CONFIG_PATH": str(_ZENML_HOME / "in-process")})

from provider_jobs import pipeline_env  # noqa: E402, F401  (a fixture of the provider-job tests)
from respools_server import RespoolsServer  # noqa: E402  (after the environment is set)


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(_ZENML_HOME, ignore_errors=True)


@pytest.fixture(scope="session")
def respools_server() -> Iterator[RespoolsServer]:
    workdir = Path(tempfile.mkdtemp(prefix="respools-server-", dir=_ZENML_HOME))
    server = RespoolsServer(workdir)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()
