"""A stand-in for a Databricks workspace's Jobs runs API as the real ``WorkspaceClient`` calls it:
``jobs/runs/submit``, ``runs/get``, ``runs/list``, ``runs/cancel`` (served under /api/2.1 and /api/2.2)
and ``clusters/list-node-types``.

Submitted tasks are parsed back with the SDK's ``jobs.SubmitTask``, runs answered as ``jobs.Run``, and
states follow the public run life cycle: each run walks its script one state per ``runs/get`` (QUEUED →
PENDING → RUNNING → TERMINATED/SUCCESS by default) and stays on the last; ``runs/cancel`` turns a live
run TERMINATING, then TERMINATED/CANCELED on the next get. ``fail(status)`` answers the next calls with
the workspace's error body instead. An ``idempotency_token`` seen before returns the first run.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from databricks.sdk.service import jobs

State = tuple[str, str | None]
SUCCEEDS: list[State] = [("QUEUED", None), ("PENDING", None), ("RUNNING", None), ("TERMINATED", "SUCCESS")]
RUNS_ON: list[State] = [("PENDING", None), ("RUNNING", None)]
FAILS: list[State] = [("PENDING", None), ("RUNNING", None), ("TERMINATED", "FAILED")]
_LIVE = {"QUEUED", "PENDING", "RUNNING", "BLOCKED", "WAITING_FOR_RETRY"}
_ERROR_CODES = {
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "RESOURCE_DOES_NOT_EXIST",
    429: "REQUEST_LIMIT_EXCEEDED",
    500: "INTERNAL_ERROR",
    503: "TEMPORARILY_UNAVAILABLE",
}


@dataclass
class FakeRun:
    run_id: int
    run_name: str
    tasks: list[jobs.SubmitTask]
    script: list[State]
    message: str = ""
    state: State = ("QUEUED", None)
    history: list[tuple[float, str]] = field(default_factory=list)

    def enter(self, state: State) -> None:
        self.state = state
        self.history.append((time.time(), "/".join(part for part in state if part)))

    def as_run(self) -> dict[str, Any]:
        life, result = self.state
        message = self.message if result == "FAILED" else ("" if life in _LIVE else f"run {life.lower()}")
        run = jobs.Run(
            run_id=self.run_id,
            run_name=self.run_name,
            run_type=jobs.RunType.SUBMIT_RUN,
            state=jobs.RunState(
                life_cycle_state=jobs.RunLifeCycleState(life),
                result_state=jobs.RunResultState(result) if result else None,
                state_message=message,
            ),
            tasks=[
                jobs.RunTask(task_key=t.task_key, new_cluster=t.new_cluster, spark_python_task=t.spark_python_task)
                for t in self.tasks
            ],
        )
        return run.as_dict()


class FakeDatabricks:
    """The server and its runs. ``plan`` sets the scripts of the next runs submitted, in order."""

    def __init__(self, node_types: list[dict[str, Any]] | None = None) -> None:
        self.runs: dict[int, FakeRun] = {}
        self.plans: list[tuple[list[State], str]] = []
        self.errors: list[int] = []
        self.calls: list[tuple[str, str]] = []
        self.node_types = node_types or []
        self._tokens: dict[str, int] = {}
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def host(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def plan(self, script: list[State], message: str = "") -> None:
        self.plans.append((script, message))

    def fail(self, status: int, times: int = 1) -> None:
        self.errors.extend([status] * times)

    def __enter__(self) -> FakeDatabricks:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def handle(self, method: str, path: str, query: dict[str, list[str]], body: bytes) -> tuple[int, dict[str, Any]]:
        with self._lock:
            if path.startswith("/.well-known/"):
                return 404, {"error_code": "NOT_FOUND", "message": "no such endpoint"}
            self.calls.append((method, path))
            if self.errors:
                status = self.errors.pop(0)
                return status, {"error_code": _ERROR_CODES[status], "message": f"fake workspace answers {status}"}
            route = re.sub(r"^/api/2\.[0-2]/", "", path)
            payload = json.loads(body) if body else {}
            if (method, route) == ("POST", "jobs/runs/submit"):
                return 200, self._submit(payload)
            if (method, route) == ("GET", "jobs/runs/list"):
                runs = [run.as_run() for run in self.runs.values()]
                return 200, {"runs": runs, "has_more": False}
            if (method, route) == ("GET", "clusters/list-node-types"):
                return 200, {"node_types": self.node_types}
            run_id = int(query.get("run_id", [payload.get("run_id", 0)])[0])
            if run_id not in self.runs:
                return 400, {"error_code": "INVALID_PARAMETER_VALUE", "message": f"Run {run_id} does not exist."}
            run = self.runs[run_id]
            if (method, route) == ("GET", "jobs/runs/get"):
                if run.script:
                    run.enter(run.script.pop(0))
                return 200, run.as_run()
            if (method, route) == ("POST", "jobs/runs/cancel"):
                if run.state[0] in _LIVE:
                    run.enter(("TERMINATING", "CANCELED"))
                    run.script = [("TERMINATED", "CANCELED")]
                return 200, {}
            return 404, {"error_code": "ENDPOINT_NOT_FOUND", "message": f"no API for {method} {path}"}

    def _submit(self, payload: dict[str, Any]) -> dict[str, Any]:
        token = payload.get("idempotency_token")
        if token in self._tokens:
            return {"run_id": self._tokens[token]}
        tasks = [jobs.SubmitTask.from_dict(task) for task in payload.get("tasks", [])]
        script, message = self.plans.pop(0) if self.plans else (list(SUCCEEDS), "")
        run = FakeRun(
            run_id=len(self.runs) + 500,
            run_name=payload.get("run_name", ""),
            tasks=tasks,
            script=list(script),
            message=message,
        )
        run.enter(run.script.pop(0))
        self.runs[run.run_id] = run
        if token:
            self._tokens[token] = run.run_id
        return {"run_id": run.run_id}


def _handler(fake: FakeDatabricks) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            url = urlsplit(self.path)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            status, answer = fake.handle(self.command, url.path, parse_qs(url.query), body)
            data = json.dumps(answer).encode()
            self.send_response(status, HTTPStatus(status).phrase)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if status == 429:
                self.send_header("Retry-After", "0")
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
