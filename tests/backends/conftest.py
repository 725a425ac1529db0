"""Fixtures of the backend tests: an isolated host identity and run directory, the fake NVML driver, and
short-lived real processes for the tests that signal process groups."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from respools.backends import registry
from respools.backends.local import nvml
from tests.backends.fake_nvml import FakeDriver, fake_pynvml
from tests.backends.helpers import HOST


@pytest.fixture(autouse=True)
def _isolated_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test is host 'gpu-a' with its own holder directory and no MPS daemon."""
    monkeypatch.setenv("RESPOOLS_HOST_NAME", HOST)
    monkeypatch.setenv("RESPOOLS_RUN_DIR", str(tmp_path / "holders"))
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path / "no-mps"))
    registry.clear_cache()


@pytest.fixture
def use_driver(monkeypatch: pytest.MonkeyPatch) -> Callable[[FakeDriver], FakeDriver]:
    """Put a fake driver behind the ``pynvml`` module the backend imports."""

    def install(driver: FakeDriver) -> FakeDriver:
        monkeypatch.setattr(nvml, "pynvml", fake_pynvml(driver))
        return driver

    return install


@pytest.fixture
def spawn() -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start a process in a session (and process group) of its own; killed at teardown if still alive."""
    started: list[subprocess.Popen[bytes]] = []

    def start(*argv: str) -> subprocess.Popen[bytes]:
        process = subprocess.Popen(argv or ("sleep", "60"), start_new_session=True)
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=5)
