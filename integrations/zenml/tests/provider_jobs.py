"""What the tests of pipelines whose steps run as provider jobs (on the Vertex and Databricks fakes) share:
the pipeline process's environment, waiting on a condition while it runs, and keeping the event log."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import pytest
from zenml_test_env import QUIET_ZENML_ENV

TESTS = Path(__file__).parent


class ProviderJob(Protocol):
    history: list[tuple[float, str]]
    """(time, provider state) as the fake moved the job."""


@pytest.fixture
def pipeline_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment of the pipeline's process and of its jobs on the fake (a ZenML store of its own)."""
    yield {
        **os.environ,
        **QUIET_ZENML_ENV,
        "ZENML_CONFIG_PATH": str(tmp_path / "zenml"),
        "RESPOOLS_CONFIG": "",
        "ZENML_LOGGING_VERBOSITY": os.environ.get("RESPOOLS_TEST_ZENML_VERBOSITY", "WARN"),  # INFO to debug
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
    }


def wait_until(condition: Callable[[], Any], timeout: float, what: str, process: subprocess.Popen[bytes]) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        assert process.poll() is None, f"the pipeline ended while waiting for {what}"
        time.sleep(0.2)
    pytest.fail(f"timed out after {timeout} s waiting for {what}")


def keep_event_log(name: str, events: list[dict[str, Any]], jobs: list[ProviderJob]) -> None:
    """Where RESPOOLS_EVENT_LOG_DIR is set, write the run's respools events and the jobs' provider states
    (the closing note of issue 22 shows them)."""
    directory = os.environ.get("RESPOOLS_EVENT_LOG_DIR")
    if not directory:
        return
    lines = [f"{e['at']} {e['kind']:<10} lease={e.get('lease_id')} {e.get('message') or ''}" for e in events]
    for number, job in enumerate(jobs, 1):
        lines += [
            f"{datetime.fromtimestamp(at).astimezone().isoformat(timespec='milliseconds')} job{number} {state}"
            for at, state in job.history
        ]
    Path(directory, f"{name}-events.txt").write_text("\n".join(sorted(lines)) + "\n")
