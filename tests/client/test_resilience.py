"""What must survive failures: a holder killed with SIGKILL stops heartbeating and its capacity returns
after the TTL; a waiting step survives a server restart without losing (or duplicating) its request; and a
submit whose answer is lost is retried into the same request, not a second one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import respools
from respools.client import Client, LeaseSession
from respools.model import RequestState
from respools.server.process import ServerProcess
from tests.client.conftest import WorldFactory, wait_for
from tests.client.server import ADMIN_TOKEN, SRC, client_test_server

HOLDER = textwrap.dedent(
    """
    import sys, time
    import respools
    from respools.client import Client

    client = Client(sys.argv[1], sys.argv[2])
    with respools.lease(gpu=1, client=client, progress=False) as lease:
        print(lease.id, flush=True)
        time.sleep(600)
    """
)


def test_a_killed_holder_s_lease_expires_and_its_capacity_returns(world: WorldFactory, tmp_path: Path) -> None:
    w = world({"gpu": 1}, ttl_s=1.0)
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    env = os.environ | {"PYTHONPATH": SRC}
    holder = subprocess.Popen(
        [sys.executable, str(script), w.admin.url, w.token], stdout=subprocess.PIPE, env=env, text=True
    )
    try:
        assert holder.stdout is not None
        lease_id = holder.stdout.readline().strip()
        assert lease_id.startswith("lse_"), lease_id
        time.sleep(1.5)  # past one TTL: heartbeats keep it alive
        assert w.client.get_lease(lease_id).state == RequestState.ACTIVE
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        killed_at = time.monotonic()
    finally:
        if holder.poll() is None:
            holder.kill()
    wait_for(lambda: w.client.get_lease(lease_id).state == RequestState.EXPIRED, timeout=10)
    expired_after = time.monotonic() - killed_at
    assert expired_after < 1.0 + 3.0, f"expired {expired_after:.1f} s after the kill (TTL 1 s)"
    with respools.lease(gpu=1, client=w.client, progress=False, timeout=10) as lease:
        assert lease.id != lease_id


@pytest.fixture
def restartable(tmp_path: Path) -> Iterator[ServerProcess]:
    server = client_test_server(tmp_path / "restart")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_a_server_restart_during_a_wait_does_not_lose_the_request(restartable: ServerProcess) -> None:
    admin = Client(restartable.url, ADMIN_TOKEN)
    admin.put("/v1/pools/restart", {"name": "restart", "capacity": {"gpu": 1}, "lease_ttl_s": 60})
    admin.put("/v1/subjects/team", {"name": "team"})
    admin.post("/v1/policies", {"subject": "team", "pool": "restart", "reserved": {"gpu": 1}})
    client = Client(restartable.url, admin.post("/v1/tokens", {"role": "subject", "subject": "team"})["token"])

    waiter_request: list[str] = []

    def waiter() -> None:
        with respools.lease(gpu=1, client=client, progress=False, timeout=120) as lease:
            waiter_request.append(lease.request_id)

    with respools.lease(gpu=1, client=client, progress=False) as first:
        thread = threading.Thread(target=waiter)
        thread.start()
        pending = wait_for(lambda: client.list_requests(states=[RequestState.PENDING]))
        restartable.kill()
        time.sleep(0.5)  # the waiter's long-poll has failed by now and it retries
        restartable.start()
        assert client.get_lease(first.id).state == RequestState.ACTIVE, "the holder's lease survived too"
    thread.join(60)
    assert not thread.is_alive()
    assert waiter_request == [pending[0].id]
    assert len(client.list_requests()) == 2, "no request was duplicated"
    assert restartable.starts == 2
    admin.close()
    client.close()


class LoseFirstAnswer(httpx.BaseTransport):
    """Forwards to the real server but loses the answer to the first submit, as a dropped connection
    after the server committed would."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.submits = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if request.method == "POST" and request.url.path == "/v1/requests":
            self.submits += 1
            if self.submits == 1:
                response.read()
                response.close()
                raise httpx.ReadError("connection lost after the server answered", request=request)
        return response

    def close(self) -> None:
        self.inner.close()


def test_an_idempotent_retry_creates_one_request(world: WorldFactory) -> None:
    w = world({"gpu": 1})
    transport = LoseFirstAnswer()
    with Client(w.admin.url, w.token, transport=transport) as client:
        session: LeaseSession = respools.lease(gpu=1, client=client, progress=False)
        with session as lease:
            assert transport.submits == 2
        requests = w.client.list_requests()
        assert [r.id for r in requests] == [lease.request_id]
        assert requests[0].state == RequestState.RELEASED
