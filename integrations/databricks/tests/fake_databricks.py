"""A stand-in for a Databricks workspace's Jobs runs API as the real ``WorkspaceClient`` calls it:
``jobs/runs/submit``, ``runs/get``, ``runs/list``, ``runs/cancel`` (served under /api/2.1 and /api/2.2)
and ``clusters/list-node-types``; and what ZenML's Databricks orchestrator calls besides: ``jobs/create``,
``jobs/get``, ``jobs/run-now`` (a job run of the created job, its tasks and job clusters), workspace
``mkdirs`` and ``import`` (the multipart upload of its wheel) and ``policies/clusters/list``.

Submitted tasks are parsed back with the SDK's ``jobs.SubmitTask``, runs answered as ``jobs.Run``, and
states follow the public run life cycle: each run walks its script one state per ``runs/get`` (QUEUED →
PENDING → RUNNING → TERMINATED/SUCCESS by default) and stays on the last; ``runs/cancel`` turns a live
run TERMINATING, then TERMINATED/CANCELED on the next get. ``fail(status)`` answers the next calls with
the workspace's error body instead. An ``idempotency_token`` seen before returns the first run. Jobs are
parsed back with ``jobs.JobSettings``.

``FakeDatabricks(execute=Executor(...))`` runs each job run's ``python_wheel_task`` tasks for real instead of
walking a script, one after another in dependency order, as processes on this machine: the run's uploaded
wheel libraries are unpacked into a directory on the tasks' ``PYTHONPATH`` (PyPI libraries are not
installed: the tests' interpreter has them), each task calls its package's entry point as Databricks does
(the named entry point, else ``package.entry_point()``) with its parameters, ``{{job.id}}``, ``{{run.id}}``
and ``{{task.name}}`` substituted, in the job cluster's ``spark_env_vars`` over the executor's environment.
The run walks QUEUED → PENDING → RUNNING (a task started) → TERMINATED with SUCCESS, or FAILED at the first
task exiting non-zero, one step per ``runs/get``; ``runs/cancel`` kills the running task's process group,
TERMINATING, then TERMINATED/CANCELED. That is how a real ZenML step entrypoint runs "on Databricks" in
the tests.
"""

from __future__ import annotations

import contextlib
import email.parser
import io
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import IO, Any
from urllib.parse import parse_qs, urlsplit

from databricks.sdk.service import compute, jobs

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


_DYNAMIC = re.compile(r"\{\{([a-z_.]+)\}\}")
"""Dynamic value references in task parameters (``{{job.id}}``)."""
_WHEEL_TASK = """
import sys
from importlib import import_module
from importlib.metadata import distribution

package, entry_point, *parameters = sys.argv[1:]
sys.argv = [package, *parameters]
named = [ep for ep in distribution(package).entry_points if ep.name == entry_point]
if named:
    target = named[0].load()
else:
    target = import_module(package)
    for part in entry_point.split("."):
        target = getattr(target, part)
sys.exit(target())
"""
"""A python_wheel_task as Databricks runs it: the package's named entry point, else
``package.entry_point()`` (ZenML's ``zenml`` / ``entrypoint.main`` is the latter)."""


@dataclass(frozen=True)
class Executor:
    """How job runs' tasks run for real: the environment and directory their processes start with."""

    env: Mapping[str, str]
    cwd: str
    log_dir: str | None = None

    def start(self, run: FakeRun, task: jobs.Task, site: str) -> subprocess.Popen[bytes]:
        wheel = task.python_wheel_task
        if wheel is None:
            raise ValueError(f"task {task.task_key}: the fake executes python_wheel_task tasks only")
        values = {"job.id": str(run.job_id), "run.id": str(run.run_id), "task.name": task.task_key}
        parameters = [_DYNAMIC.sub(lambda m: values.get(m[1], m[0]), p) for p in wheel.parameters or []]
        cluster = run.cluster_of(task)
        env = {**self.env, **((cluster.spark_env_vars or {}) if cluster else {})}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (site, env.get("PYTHONPATH")) if p)
        sink: int | IO[bytes] = subprocess.DEVNULL
        if self.log_dir is not None:
            sink = open(os.path.join(self.log_dir, f"run{run.run_id}-{task.task_key[-40:]}.log"), "wb")  # noqa: SIM115
        argv = [sys.executable, "-c", _WHEEL_TASK, wheel.package_name, wheel.entry_point, *parameters]
        return subprocess.Popen(
            argv, env=env, cwd=self.cwd, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )


@dataclass
class FakeRun:
    run_id: int
    run_name: str
    tasks: list[Any]
    """``jobs.SubmitTask`` of a one-time run, ``jobs.Task`` of a job run."""
    script: list[State]
    message: str = ""
    state: State = ("QUEUED", None)
    history: list[tuple[float, str]] = field(default_factory=list)
    job_id: int | None = None
    job_clusters: list[jobs.JobCluster] = field(default_factory=list)
    task_states: dict[str, State] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None
    current: str | None = None
    site: str | None = None

    def enter(self, state: State) -> None:
        self.state = state
        self.history.append((time.time(), "/".join(part for part in state if part)))

    def cluster_of(self, task: Any) -> compute.ClusterSpec | None:
        """The task's own cluster, or the job cluster it names."""
        if task.new_cluster is not None:
            cluster: compute.ClusterSpec = task.new_cluster
            return cluster
        key = getattr(task, "job_cluster_key", None)
        return next((c.new_cluster for c in self.job_clusters if c.job_cluster_key == key), None)

    def as_run(self) -> dict[str, Any]:
        life, result = self.state
        message = self.message if result == "FAILED" else ("" if life in _LIVE else f"run {life.lower()}")
        run = jobs.Run(
            run_id=self.run_id,
            job_id=self.job_id,
            run_name=self.run_name,
            run_type=jobs.RunType.SUBMIT_RUN if self.job_id is None else jobs.RunType.JOB_RUN,
            state=jobs.RunState(
                life_cycle_state=jobs.RunLifeCycleState(life),
                result_state=jobs.RunResultState(result) if result else None,
                state_message=message,
            ),
            job_clusters=self.job_clusters or None,
            tasks=[self._run_task(t) for t in self.tasks],
        )
        return run.as_dict()

    def _run_task(self, task: Any) -> jobs.RunTask:
        life, result = self.task_states.get(task.task_key, self.state)
        return jobs.RunTask(
            task_key=task.task_key,
            new_cluster=task.new_cluster,
            job_cluster_key=getattr(task, "job_cluster_key", None),
            spark_python_task=task.spark_python_task,
            python_wheel_task=task.python_wheel_task,
            depends_on=task.depends_on,
            libraries=task.libraries,
            state=jobs.RunState(
                life_cycle_state=jobs.RunLifeCycleState(life),
                result_state=jobs.RunResultState(result) if result else None,
            ),
        )


class FakeDatabricks:
    """The server and its runs. ``plan`` sets the scripts of the next runs submitted, in order."""

    def __init__(self, node_types: list[dict[str, Any]] | None = None, execute: Executor | None = None) -> None:
        self.execute = execute
        self.runs: dict[int, FakeRun] = {}
        self.jobs: dict[int, jobs.JobSettings] = {}
        self.files: dict[str, bytes] = {}
        self.directories: set[str] = set()
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
        for run in self.runs.values():
            if run.process is not None and run.process.poll() is None:
                _kill(run.process)
        self._server.shutdown()
        self._server.server_close()

    def handle(
        self, method: str, path: str, query: dict[str, list[str]], body: bytes, content_type: str = ""
    ) -> tuple[int, dict[str, Any]]:
        with self._lock:
            if path.startswith("/.well-known/"):
                return 404, {"error_code": "NOT_FOUND", "message": "no such endpoint"}
            self.calls.append((method, path))
            if self.errors:
                status = self.errors.pop(0)
                return status, {"error_code": _ERROR_CODES[status], "message": f"fake workspace answers {status}"}
            route = re.sub(r"^/api/2\.[0-2]/", "", path)
            if (method, route) == ("POST", "workspace/import"):
                return self._import(content_type, body)
            payload = json.loads(body) if body else {}
            if (method, route) == ("POST", "jobs/runs/submit"):
                return 200, self._submit(payload)
            if (method, route) == ("GET", "jobs/runs/list"):
                return 200, self._list(query)
            if (method, route) == ("POST", "workspace/mkdirs"):
                self.directories.add(payload["path"])
                return 200, {}
            if (method, route) == ("POST", "workspace/delete"):
                prefix = payload["path"].rstrip("/") + "/"
                self.files = {p: data for p, data in self.files.items() if not p.startswith(prefix)}
                return 200, {}
            if (method, route) == ("GET", "policies/clusters/list"):
                return 200, {"policies": [{"policy_id": "E0631F5C0D0009B7", "name": "Job Compute"}]}
            if (method, route) == ("POST", "jobs/create"):
                return self._create(payload)
            if (method, route) == ("GET", "jobs/get"):
                job_id = int(query.get("job_id", ["0"])[0])
                if job_id not in self.jobs:
                    return 400, {"error_code": "INVALID_PARAMETER_VALUE", "message": f"Job {job_id} does not exist."}
                return 200, {"job_id": job_id, "settings": self.jobs[job_id].as_dict()}
            if (method, route) == ("POST", "jobs/run-now"):
                return self._run_now(payload)
            if (method, route) == ("GET", "clusters/list-node-types"):
                return 200, {"node_types": self.node_types}
            run_id = int(query.get("run_id", [payload.get("run_id", 0)])[0])
            if run_id not in self.runs:
                return 400, {"error_code": "INVALID_PARAMETER_VALUE", "message": f"Run {run_id} does not exist."}
            run = self.runs[run_id]
            if (method, route) == ("GET", "jobs/runs/get"):
                if run.script:
                    run.enter(run.script.pop(0))
                elif self.execute is not None and run.state[0] in _LIVE:
                    self._advance(run)
                return 200, run.as_run()
            if (method, route) == ("POST", "jobs/runs/cancel"):
                if run.state[0] in _LIVE:
                    if run.process is not None:
                        _kill(run.process)
                    for key, state in run.task_states.items():
                        if state[0] in _LIVE:
                            run.task_states[key] = ("TERMINATED", "CANCELED")
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

    def _list(self, query: dict[str, list[str]]) -> dict[str, Any]:
        runs = list(self.runs.values())
        if query.get("active_only", ["false"])[0] == "true":
            runs = [run for run in runs if run.state[0] in _LIVE or run.state[0] == "TERMINATING"]
        if "run_type" in query:
            wanted = jobs.RunType(query["run_type"][0])
            runs = [run for run in runs if (run.job_id is None) == (wanted == jobs.RunType.SUBMIT_RUN)]
        if "job_id" in query:
            runs = [run for run in runs if run.job_id == int(query["job_id"][0])]
        return {"runs": [run.as_run() for run in runs], "has_more": False}

    def _import(self, content_type: str, body: bytes) -> tuple[int, dict[str, Any]]:
        """``workspace/import`` as the SDK's ``upload`` sends it: multipart form fields and a content file."""
        message = email.parser.BytesParser().parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + body)
        fields: dict[str, bytes] = {}
        for part in message.walk():
            name = part.get_param("name", header="content-disposition")
            if name is not None and not part.is_multipart():
                payload = part.get_payload(decode=True)
                fields[str(name)] = payload if isinstance(payload, bytes) else b""
        path = fields.get("path", b"").decode()
        if not path or "content" not in fields:
            return 400, {"error_code": "INVALID_PARAMETER_VALUE", "message": "path and content are required"}
        parent = path.rsplit("/", 1)[0]
        if parent not in self.directories:
            missing = f"The parent folder ({parent}) does not exist."
            return 404, {"error_code": "RESOURCE_DOES_NOT_EXIST", "message": missing}
        if path in self.files and fields.get("overwrite") != b"true":
            return 400, {"error_code": "RESOURCE_ALREADY_EXISTS", "message": f"{path} already exists."}
        self.files[path] = fields["content"]
        return 200, {}

    def _create(self, payload: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        job = jobs.JobSettings.from_dict(payload)
        keys = {task.task_key for task in job.tasks or []}
        clusters = {cluster.job_cluster_key for cluster in job.job_clusters or []}
        for task in job.tasks or []:
            missing = [d.task_key for d in task.depends_on or [] if d.task_key not in keys]
            if missing or (task.job_cluster_key and task.job_cluster_key not in clusters):
                problem = f"depends on unknown task(s) {missing}" if missing else "names an unknown job cluster"
                return 400, {"error_code": "INVALID_PARAMETER_VALUE", "message": f"Task {task.task_key} {problem}."}
        job_id = len(self.jobs) + 900
        self.jobs[job_id] = job
        return 200, {"job_id": job_id}

    def _run_now(self, payload: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        job_id = int(payload.get("job_id", 0))
        if job_id not in self.jobs:
            return 400, {"error_code": "INVALID_PARAMETER_VALUE", "message": f"Job {job_id} does not exist."}
        job = self.jobs[job_id]
        script, message = self.plans.pop(0) if self.plans else (list(SUCCEEDS), "")
        if self.execute is not None:
            script, message = [("QUEUED", None)], ""
        run = FakeRun(
            run_id=len(self.runs) + 500,
            run_name=job.name or "Untitled",
            tasks=list(job.tasks or []),
            script=list(script),
            message=message,
            job_id=job_id,
            job_clusters=list(job.job_clusters or []),
        )
        run.task_states = {task.task_key: ("PENDING", None) for task in run.tasks}
        run.enter(run.script.pop(0))
        self.runs[run.run_id] = run
        return 200, {"run_id": run.run_id, "number_in_job": run.run_id}

    def _advance(self, run: FakeRun) -> None:
        """An executed run's next state: PENDING (its wheels unpacked), RUNNING once a task started, the
        next task once one succeeded, then its outcome."""
        assert self.execute is not None
        if run.state[0] == "QUEUED":
            run.site = self._unpack_wheels(run)
            run.enter(("PENDING", None))
            return
        if run.process is not None:
            if run.process.poll() is None:
                return
            assert run.current is not None
            code = run.process.returncode
            run.task_states[run.current] = ("TERMINATED", "SUCCESS" if code == 0 else "FAILED")
            run.process = None
            if code != 0:
                run.message = f"Task {run.current} failed with message: the process exited with status {code}."
                run.enter(("TERMINATED", "FAILED"))
                return
        task = self._next_task(run)
        if task is None:
            run.enter(("TERMINATED", "SUCCESS"))
            return
        assert run.site is not None
        run.current = task.task_key
        run.process = self.execute.start(run, task, run.site)
        run.task_states[task.task_key] = ("RUNNING", None)
        if run.state[0] != "RUNNING":
            run.enter(("RUNNING", None))

    @staticmethod
    def _next_task(run: FakeRun) -> Any:
        done = {key for key, state in run.task_states.items() if state == ("TERMINATED", "SUCCESS")}
        for task in run.tasks:
            waiting = run.task_states[task.task_key][0] == "PENDING"
            if waiting and all(d.task_key in done for d in task.depends_on or []):
                return task
        return None

    def _unpack_wheels(self, run: FakeRun) -> str:
        """A directory holding the run's wheel libraries as installed (a pure-Python wheel unpacked is one)."""
        site = tempfile.mkdtemp(prefix=f"fake-databricks-run{run.run_id}-")
        for task in run.tasks:
            for library in task.libraries or []:
                if library.whl is not None:
                    with zipfile.ZipFile(io.BytesIO(self.files[library.whl])) as wheel:
                        wheel.extractall(site)
        return site


def _kill(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _handler(fake: FakeDatabricks) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            url = urlsplit(self.path)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            content_type = self.headers.get("Content-Type") or ""
            try:
                status, answer = fake.handle(self.command, url.path, parse_qs(url.query), body, content_type)
            except Exception as exc:  # a request the fake cannot parse: refused at once, not retried for minutes
                status, answer = 400, {"error_code": "INVALID_PARAMETER_VALUE", "message": f"fake: {exc!r}"}
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
