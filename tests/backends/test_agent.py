"""The host agent against an ``httpx.MockTransport`` server: heartbeats with the discovered inventory,
retries, over-use reports, stopping workloads whose lease was taken back, and the CLI command."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import httpx
import pytest
import tenacity
import typer
from click.testing import CliRunner

from respools.backends.local import LocalBackend, register_holder
from respools.cli import agent as agent_module
from respools.cli import app
from respools.cli.agent import AgentError, HostAgent, ServerApi, build_client
from respools.model import RequestState
from tests.backends.fake_nvml import FakeDriver, FakeProcess
from tests.backends.helpers import H100_UUID, HOST, POOL, T0, fraction, make_lease, two_gpu_driver

UseDriver = Callable[[FakeDriver], FakeDriver]
Spawn = Callable[..., subprocess.Popen[bytes]]
TOKEN = "rp_agent_token"


class FakeServer:
    """Just enough of the respools API: a pool, leases, and what the agent sent."""

    def __init__(self) -> None:
        self.pool: dict[str, Any] = {
            "name": POOL,
            "stack": "local",
            "settings": {},
            "created_at": "2026-01-05T08:00:00Z",
            "updated_at": "2026-01-05T08:00:00Z",
        }
        self.leases: dict[str, dict[str, Any]] = {}
        self.requests: list[httpx.Request] = []
        self.failures: list[int] = []  # statuses to answer the next host PUTs with

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        method, path = request.method, request.url.path
        if method == "GET" and path == f"/v1/pools/{POOL}":
            return httpx.Response(200, json=self.pool)
        if method == "PUT" and path.startswith(f"/v1/pools/{POOL}/hosts/"):
            if self.failures:
                return httpx.Response(self.failures.pop(0), json={"detail": "try again"})
            return httpx.Response(200, json=json.loads(request.content))
        if method == "GET" and path.startswith("/v1/leases/"):
            lease = self.leases.get(path.rsplit("/", 1)[1])
            return httpx.Response(200, json=lease) if lease else httpx.Response(404, json={"detail": "no lease"})
        if method == "POST" and path.endswith("/overuse"):
            return httpx.Response(202, json={})
        if method == "POST" and path.endswith("/stopped"):
            lease = self.leases[path.split("/")[-2]]
            lease |= {"state": "preempted"}
            return httpx.Response(200, json=lease)
        return httpx.Response(404, json={"detail": f"no route {method} {path}"})

    def sent(self, method: str, suffix: str = "") -> list[httpx.Request]:
        return [r for r in self.requests if r.method == method and r.url.path.endswith(suffix)]


@pytest.fixture
def server() -> FakeServer:
    return FakeServer()


def make_agent(server: FakeServer, **kwargs: Any) -> HostAgent:
    client = build_client("http://respools.test", TOKEN, httpx.MockTransport(server))
    api = ServerApi(client, wait=tenacity.wait_none())
    return HostAgent(POOL, api, LocalBackend(), now=lambda: T0, **kwargs)


def test_heartbeat_puts_the_discovered_host(use_driver: UseDriver, server: FakeServer) -> None:
    use_driver(two_gpu_driver())

    report = make_agent(server).tick()

    (put,) = server.sent("PUT")
    assert put.url.path == f"/v1/pools/{POOL}/hosts/{HOST}"
    assert put.headers["authorization"] == f"Bearer {TOKEN}"
    assert report.registered is not None
    assert json.loads(put.content) == report.registered.model_dump(mode="json")
    assert [g["uuid"] for g in json.loads(put.content)["gpus"]][1] == H100_UUID
    assert report.errors == []


def test_no_driver_sends_nothing_and_says_why_once(
    use_driver: UseDriver, server: FakeServer, caplog: pytest.LogCaptureFixture
) -> None:
    use_driver(FakeDriver([], library_missing=True))
    agent = make_agent(server)

    with caplog.at_level(logging.WARNING):
        first, second = agent.tick(), agent.tick()

    assert server.sent("PUT") == []
    assert first.discovery_error == second.discovery_error
    assert first.discovery_error is not None and "no NVIDIA driver" in first.discovery_error
    assert first.errors == []
    assert [r.getMessage() for r in caplog.records] == [f"host {HOST}: {first.discovery_error}"]


def test_transient_failures_are_retried(use_driver: UseDriver, server: FakeServer) -> None:
    use_driver(two_gpu_driver())
    server.failures = [503, 502]

    report = make_agent(server).tick()

    assert len(server.sent("PUT")) == 3
    assert report.registered is not None


def test_a_rejected_heartbeat_is_reported_not_retried(use_driver: UseDriver, server: FakeServer) -> None:
    use_driver(two_gpu_driver())
    server.failures = [401]

    report = make_agent(server).tick()

    assert len(server.sent("PUT")) == 1
    assert report.registered is None
    assert report.errors == [f"heartbeat failed: PUT /v1/pools/{POOL}/hosts/{HOST}: 401 Unauthorized try again"]


def test_server_unreachable_keeps_the_agent_alive(use_driver: UseDriver) -> None:
    use_driver(two_gpu_driver())

    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    client = build_client("http://respools.test", TOKEN, httpx.MockTransport(down))
    report = HostAgent(POOL, ServerApi(client, wait=tenacity.wait_none()), LocalBackend()).tick()

    assert report.registered is None
    assert len(report.errors) == 2 and all("ConnectError: connection refused" in e for e in report.errors)


def test_overuse_is_posted_with_the_pools_preempt_setting(
    use_driver: UseDriver, server: FakeServer, spawn: Spawn
) -> None:
    holder = spawn()
    lease = make_lease(fraction(250, 20389))
    register_holder(lease, pid=holder.pid)
    use_driver(two_gpu_driver([FakeProcess(holder.pid, 30000)]))
    server.pool["settings"] = {"preempt_on_overuse": True}
    server.leases[lease.id] = lease.model_dump(mode="json")

    report = make_agent(server).tick()

    (post,) = server.sent("POST", "/overuse")
    assert post.url.path == f"/v1/leases/{lease.id}/overuse"
    body = json.loads(post.content)
    assert body == report.overuse[0].model_dump(mode="json")
    assert (body["used_memory_mb"], body["cap_memory_mb"], body["preempt"]) == (30000, 20389, True)
    assert report.stopped == [], "an active lease is not stopped by the agent"


@pytest.mark.parametrize(
    ("state", "deadline_s", "stopped"),
    [
        (RequestState.PREEMPTING, -1, True),
        (RequestState.PREEMPTING, 30, False),
        (RequestState.PREEMPTED, None, True),
        (RequestState.EXPIRED, None, True),
        (RequestState.ACTIVE, None, False),
    ],
)
def test_workloads_of_taken_back_leases_are_stopped(
    use_driver: UseDriver,
    server: FakeServer,
    spawn: Spawn,
    state: RequestState,
    deadline_s: int | None,
    stopped: bool,
) -> None:
    use_driver(two_gpu_driver())
    workload = spawn()
    deadline = None if deadline_s is None else T0 + timedelta(seconds=deadline_s)
    lease = make_lease(fraction(250, 20389), state=state, preempt_deadline=deadline)
    register_holder(lease, pid=workload.pid)
    server.leases[lease.id] = lease.model_dump(mode="json")

    report = make_agent(server).tick()

    assert report.stopped == ([lease.id] if stopped else [])
    if stopped:
        assert workload.wait(timeout=5) == -signal.SIGTERM
    else:
        assert workload.poll() is None


def test_a_pool_of_another_stack_is_refused(use_driver: UseDriver, server: FakeServer) -> None:
    use_driver(two_gpu_driver())
    server.pool["stack"] = "kubernetes"

    with pytest.raises(AgentError, match="pool 'lab' is on stack 'kubernetes'; the host agent serves local pools"):
        make_agent(server).tick()


def test_run_ticks_until_stopped(use_driver: UseDriver, server: FakeServer) -> None:
    use_driver(two_gpu_driver())
    waits: list[float] = []

    def wait(seconds: float) -> bool:
        waits.append(seconds)
        return len(waits) == 3

    make_agent(server).run(wait, interval_s=15)

    assert waits == [15, 15, 15]
    assert len(server.sent("PUT")) == 3


def test_a_failing_tick_does_not_end_the_loop(
    use_driver: UseDriver, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_driver(two_gpu_driver())
    agent = make_agent(server)
    calls = iter([RuntimeError("bug"), None])

    def flaky_watch(report: Any) -> None:
        error = next(calls)
        if error is not None:
            raise error

    monkeypatch.setattr(agent, "_watch", flaky_watch)
    waits: list[float] = []

    def sleep(seconds: float) -> bool:
        waits.append(seconds)
        return len(waits) == 2

    agent.run(sleep, interval_s=1)

    assert len(server.sent("PUT")) == 2


# -- the command ---------------------------------------------------------------------------------------------


def invoke(*args: str) -> Any:
    # get_group: always a command group, however many commands the other modules have registered so far.
    group: Any = typer.main.get_group(app)  # a click group; typer's runner types ask for a Typer
    return CliRunner().invoke(group, list(args))


def test_agent_command_once(use_driver: UseDriver, server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    driver = use_driver(two_gpu_driver())
    monkeypatch.setattr(agent_module, "_transport", httpx.MockTransport(server))

    result = invoke("agent", "--pool", POOL, "--url", "http://respools.test", "--token", TOKEN, "--once")

    assert result.exit_code == 0, result.output
    assert [r.url.path for r in server.sent("PUT")] == [f"/v1/pools/{POOL}/hosts/{HOST}"]
    assert driver.refcount == 0 and driver.inits >= 2, "one session for the agent's life, nested ones per tick"


def test_agent_command_without_driver_fails_once(
    use_driver: UseDriver, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_driver(FakeDriver([], library_missing=True))
    monkeypatch.setattr(agent_module, "_transport", httpx.MockTransport(server))

    result = invoke("agent", "--pool", POOL, "--once")

    assert result.exit_code == 1
    assert result.output.splitlines()[-1] == (
        f"respools agent: host {HOST} not registered: "
        "no NVIDIA driver on this host (libnvidia-ml.so.1 not found); it has no GPUs to offer"
    )
    assert "Traceback" not in result.output


def test_agent_command_on_a_kubernetes_pool(
    use_driver: UseDriver, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_driver(two_gpu_driver())
    server.pool["stack"] = "kubernetes"
    monkeypatch.setattr(agent_module, "_transport", httpx.MockTransport(server))

    result = invoke("agent", "--pool", POOL, "--once")

    assert result.exit_code == 2
    assert "respools agent: pool 'lab' is on stack 'kubernetes'" in result.output


def test_agent_command_with_a_bad_pool_name() -> None:
    result = invoke("agent", "--pool", "Not A Pool", "--once")

    assert result.exit_code == 2
    assert "respools agent: name: String should match pattern" in result.output


def test_the_agent_moves_to_the_next_replica_url(use_driver: UseDriver, server: FakeServer) -> None:
    use_driver(two_gpu_driver())
    urls = "http://replica-a.test,http://replica-b.test"

    def replicas(request: httpx.Request) -> httpx.Response:
        if request.url.host == "replica-a.test":
            raise httpx.ConnectError("connection refused", request=request)
        return server(request)

    client = build_client(urls, TOKEN, httpx.MockTransport(replicas))
    api = ServerApi(client, wait=tenacity.wait_none(), urls=urls.split(","))
    report = HostAgent(POOL, api, LocalBackend()).tick()
    assert report.registered is not None and report.errors == []
    assert str(client.base_url).rstrip("/") == "http://replica-b.test"
