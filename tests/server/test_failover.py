"""The SDK survives replica failover (issue 24, part 3): three ``respools server`` processes on one
PostgreSQL database, ``respools.Client`` configured with all three URLs, and a replica killed with
SIGKILL every couple of seconds (restarted at the next kill, so one is always up, two most of the time)
while clients long-poll
pending requests, heartbeat leases, and submit and release. No call may fail while any replica is up.

Bounded to ~30 s with the replicas' start; ``FAILOVER_CLIENTS`` (per kind) and ``FAILOVER_RUN_S`` in the
environment scale it up towards the issue's 200-client soak."""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pytest

from respools.client import Client
from respools.model import RequestSpec, RequestState
from tests.server import pg
from tests.server.servers import ServerProcess, start_server, wait_ready

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

ADMIN = "rp_failover_admin"
REPLICAS = 3
CLIENTS_PER_KIND = int(os.environ.get("FAILOVER_CLIENTS", "4"))
RUN_S = float(os.environ.get("FAILOVER_RUN_S", "10"))
KILL_EVERY_S = 2.2
T = TypeVar("T")


@dataclass
class Tally:
    calls: int = 0
    failures: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def call(self, what: str, action: Callable[[], T]) -> T:
        try:
            result = action()
        except Exception as exc:
            with self.lock:
                self.failures.append(f"{what}: {exc!r}")
            raise
        with self.lock:
            self.calls += 1
        return result


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[list[ServerProcess]]:
    reason = pg.unreachable_reason()
    if reason:
        pytest.skip(reason)
    with pg.scratch_database("respools_test_failover") as url:
        started = [start_server(url, ADMIN, tmp_path) for _ in range(REPLICAS)]
        try:
            for server in started:
                wait_ready(server)
            yield started
        finally:
            for server in started:
                server.stop()


def _setup(admin: Client) -> str:
    admin.put("/v1/pools/busy", {"name": "busy", "capacity": {"gpu": 64}, "lease_ttl_s": 60})
    admin.put("/v1/pools/full", {"name": "full", "capacity": {"gpu": 1}, "lease_ttl_s": 60})
    admin.put("/v1/subjects/team", {"name": "team"})
    admin.post("/v1/policies", {"subject": "team", "pool": "busy", "reserved": {"gpu": 64}, "priority": 20})
    admin.post("/v1/policies", {"subject": "team", "pool": "full", "reserved": {"gpu": 1}, "priority": 10})
    token: str = admin.post("/v1/tokens", {"role": "subject", "subject": "team"})["token"]
    return token


def _long_polls(client: Client, tally: Tally, stop: threading.Event) -> None:
    """A request that waits for the full pool, long-polled again and again (each poll healthy for up to
    3 s, so kills land in the middle of polls)."""
    spec = RequestSpec(resources={"gpu": 1}, pools=["full"])
    request = tally.call("submit", lambda: client.submit(spec))
    while not stop.is_set():
        tally.call("long-poll", lambda: client.wait_request(request.id, state=RequestState.PENDING, timeout=3))


def _heartbeats(client: Client, tally: Tally, stop: threading.Event) -> None:
    spec = RequestSpec(resources={"gpu": 1}, pools=["busy"])
    request = tally.call("submit", lambda: client.submit(spec, wait=10))
    lease_id = request.lease_id
    assert lease_id is not None
    while not stop.is_set():
        tally.call("heartbeat", lambda: client.heartbeat(lease_id))
        stop.wait(0.2)
    tally.call("release", lambda: client.release(lease_id))


def _submissions(client: Client, tally: Tally, stop: threading.Event) -> None:
    spec = RequestSpec(resources={"gpu": 1}, pools=["busy"])
    while not stop.is_set():
        request = tally.call("submit", lambda: client.submit(spec, wait=10))
        if request.lease_id is not None:
            tally.call("release", functools.partial(client.release, request.lease_id))


def _killer(servers: list[ServerProcess], stop: threading.Event, kills: list[float]) -> None:
    """SIGKILL one replica every KILL_EVERY_S, round robin, first restarting the one killed before: one
    is down and another may still be starting, so every call happens while at least one replica is up."""
    victim = 0
    while not stop.wait(KILL_EVERY_S):
        for server in servers:
            if not server.alive():
                server.start(wait=False)
        servers[victim].kill()
        kills.append(time.monotonic())
        victim = (victim + 1) % len(servers)


def test_no_call_fails_while_any_replica_is_up(replicas: list[ServerProcess]) -> None:
    urls = ",".join(server.url for server in replicas)
    with Client(urls, ADMIN) as admin:
        token = _setup(admin)
    tally, stop = Tally(), threading.Event()
    kills: list[float] = []
    clients = [Client(urls, token) for _ in range(3 * CLIENTS_PER_KIND)]
    kinds = [_long_polls, _heartbeats, _submissions]
    threads = [
        threading.Thread(target=_guarded, args=(kinds[i % 3], client, tally, stop), daemon=True)
        for i, client in enumerate(clients)
    ]
    killer = threading.Thread(target=_killer, args=(replicas, stop, kills), daemon=True)
    for thread in threads:
        thread.start()
    killer.start()
    time.sleep(RUN_S)
    stop.set()
    killer.join(30)
    for thread in threads:
        thread.join(60)
    failovers = sum(client._transport.failovers for client in clients)
    for client in clients:
        client.close()
    print(
        f"failover: {tally.calls} calls, {len(kills)} replicas killed, {failovers} failovers, "
        f"{len(tally.failures)} failures"
    )
    assert not tally.failures, tally.failures[:5]
    assert len(kills) >= 4 and failovers >= len(kills), (len(kills), failovers)
    assert tally.calls > 100


def _guarded(
    kind: Callable[[Client, Tally, threading.Event], None], client: Client, tally: Tally, stop: threading.Event
) -> None:
    try:
        kind(client, tally, stop)
    except Exception as exc:  # recorded by Tally; a thread's crash must not go unseen either
        with tally.lock:
            tally.failures.append(f"{kind.__name__} stopped: {exc!r}")
