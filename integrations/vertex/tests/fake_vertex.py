"""A stand-in for Vertex AI's ``customJobs`` REST API (v1), as the real ``JobServiceClient`` calls it over
its REST transport: create (``POST .../customJobs``), get, list with a label filter, and ``:cancel``.

Bodies are parsed back with the SDK's own ``CustomJob`` type and answered in it, and states follow the
public ``JobState`` machine: each job walks its script one state per GET (QUEUED → PENDING → RUNNING →
SUCCEEDED by default) and stays on the last; ``:cancel`` turns a live job CANCELLING, then CANCELLED on the
next GET. ``fail(status)`` answers the next calls with Google's error body instead.

``FakeVertex(execute=Executor(...))`` runs each job's container for real instead of walking a script, as
a process on this machine (the image is not pulled: the command runs in the tests' interpreter, with the
job's environment): QUEUED → PENDING → RUNNING once the process started → SUCCEEDED or FAILED by its exit
status; ``:cancel`` kills the process group, CANCELLING, then CANCELLED. That is how a real ZenML step
entrypoint runs "on Vertex" in the tests.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import IO, Any
from urllib.parse import parse_qs, urlsplit

from google.cloud import aiplatform_v1

JobState = aiplatform_v1.JobState
SUCCEEDS = ["JOB_STATE_QUEUED", "JOB_STATE_PENDING", "JOB_STATE_RUNNING", "JOB_STATE_SUCCEEDED"]
RUNS_ON = ["JOB_STATE_QUEUED", "JOB_STATE_PENDING", "JOB_STATE_RUNNING"]
FAILS = ["JOB_STATE_QUEUED", "JOB_STATE_RUNNING", "JOB_STATE_FAILED"]
_DONE = {"JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_CANCELLING"}
_GOOGLE_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}
_LABEL_TERM = re.compile(r'labels\.([a-z0-9_-]+)="([^"]*)"')


@dataclass(frozen=True)
class Executor:
    """How jobs run for real: the environment and directory their container command runs with."""

    env: Mapping[str, str]
    cwd: str
    log_dir: str | None = None

    def start(self, job: aiplatform_v1.CustomJob) -> subprocess.Popen[bytes]:
        container = job.job_spec.worker_pool_specs[0].container_spec
        argv = [*container.command, *container.args]
        if argv and argv[0] in ("python", "python3"):
            argv[0] = sys.executable
        env = {**self.env, **{var.name: var.value for var in container.env}}
        sink: int | IO[bytes] = subprocess.DEVNULL
        if self.log_dir is not None:
            sink = open(os.path.join(self.log_dir, f"{job.name.rsplit('/', 1)[-1]}.log"), "wb")  # noqa: SIM115
        return subprocess.Popen(
            argv, env=env, cwd=self.cwd, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )


@dataclass
class FakeJob:
    job: aiplatform_v1.CustomJob
    script: list[str]
    error: str = ""
    history: list[tuple[float, str]] = field(default_factory=list)
    process: subprocess.Popen[bytes] | None = None

    def enter(self, state: str) -> None:
        self.job.state = getattr(JobState, state)
        self.history.append((time.time(), state))


class FakeVertex:
    """The server and its jobs. ``plans`` are the scripts of the next jobs created, in order."""

    def __init__(self, execute: Executor | None = None) -> None:
        self.execute = execute
        self.jobs: dict[str, FakeJob] = {}
        self.plans: list[tuple[list[str], str]] = []
        self.calls: list[tuple[str, str]] = []
        self.errors: list[int] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def plan(self, script: list[str], error: str = "") -> None:
        self.plans.append((script, error))

    def fail(self, status: int, times: int = 1) -> None:
        self.errors.extend([status] * times)

    def __enter__(self) -> FakeVertex:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for fake in self.jobs.values():
            if fake.process is not None and fake.process.poll() is None:
                _kill(fake.process)
        self._server.shutdown()
        self._server.server_close()

    # -- the API -----------------------------------------------------------------------------------

    def handle(self, method: str, path: str, query: dict[str, list[str]], body: bytes) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.calls.append((method, path))
            if self.errors:
                status = self.errors.pop(0)
                message = f"fake Vertex AI answers {status}"
                return status, {"error": {"code": status, "message": message, "status": _GOOGLE_STATUS[status]}}
            match = re.fullmatch(r"/v1/(projects/[^/]+/locations/[^/]+)/customJobs", path)
            if match and method == "POST":
                return 200, self._create(match.group(1), body)
            if match and method == "GET":
                return 200, self._list(query.get("filter", [""])[0])
            match = re.fullmatch(r"/v1/(projects/[^/]+/locations/[^/]+/customJobs/\d+)(:cancel)?", path)
            if match is None or match.group(1) not in self.jobs:
                return 404, {"error": {"code": 404, "message": f"{path} not found", "status": "NOT_FOUND"}}
            fake = self.jobs[match.group(1)]
            if match.group(2) and method == "POST":
                if fake.process is not None and fake.job.state.name not in _DONE:
                    _kill(fake.process)
                if fake.job.state.name not in _DONE:
                    fake.enter("JOB_STATE_CANCELLING")
                    fake.script = ["JOB_STATE_CANCELLED"]
                return 200, {}
            if method == "GET":
                if self.execute is not None and not fake.script:
                    self._advance(fake)
                elif fake.script:
                    fake.enter(fake.script.pop(0))
                    if fake.job.state == JobState.JOB_STATE_FAILED:
                        fake.job.error = {"code": 3, "message": fake.error or "the replica workerpool0-0 exited 1"}
                return 200, _json(fake.job)
            return 405, {"error": {"code": 405, "message": "method not allowed", "status": "UNIMPLEMENTED"}}

    def _create(self, parent: str, body: bytes) -> dict[str, Any]:
        job = aiplatform_v1.CustomJob.from_json(body.decode() or "{}")
        job.name = f"{parent}/customJobs/{len(self.jobs) + 1000}"
        script, error = self.plans.pop(0) if self.plans else (list(SUCCEEDS), "")
        if self.execute is not None:
            script, error = ["JOB_STATE_QUEUED"], ""
        fake = FakeJob(job=job, script=list(script), error=error)
        fake.enter(fake.script.pop(0))
        self.jobs[job.name] = fake
        return _json(job)

    def _advance(self, fake: FakeJob) -> None:
        """An executed job's next state: PENDING, RUNNING once its process started, then its outcome."""
        state = fake.job.state.name
        if state == "JOB_STATE_QUEUED":
            fake.enter("JOB_STATE_PENDING")
        elif state == "JOB_STATE_PENDING":
            assert self.execute is not None
            fake.process = self.execute.start(fake.job)
            fake.enter("JOB_STATE_RUNNING")
        elif state == "JOB_STATE_RUNNING" and fake.process is not None and fake.process.poll() is not None:
            code = fake.process.returncode
            if code == 0:
                fake.enter("JOB_STATE_SUCCEEDED")
            else:
                fake.enter("JOB_STATE_FAILED")
                fake.job.error = {
                    "code": 3,
                    "message": f"The replica workerpool0-0 exited with a non-zero status of {code}.",
                }

    def _list(self, filter_: str) -> dict[str, Any]:
        wanted = dict(_LABEL_TERM.findall(filter_))
        found = [f.job for f in self.jobs.values() if all(f.job.labels.get(k) == v for k, v in wanted.items())]
        return {"customJobs": [_json(job) for job in found]}

    def created(self) -> Iterator[aiplatform_v1.CustomJob]:
        for fake in self.jobs.values():
            yield fake.job


def _kill(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _json(job: aiplatform_v1.CustomJob) -> dict[str, Any]:
    answer: dict[str, Any] = json.loads(aiplatform_v1.CustomJob.to_json(job))
    return answer


def _handler(fake: FakeVertex) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            url = urlsplit(self.path)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            status, answer = fake.handle(self.command, url.path, parse_qs(url.query), body)
            data = json.dumps(answer).encode()
            self.send_response(status, HTTPStatus(status).phrase)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
