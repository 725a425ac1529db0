"""Several server processes on one PostgreSQL database, many concurrent clients, and the leader killed
halfway: no GPU is ever granted twice, no acknowledged request or release is lost, and another replica
takes over the reconciler within seconds.

The check replays the event log: the leader sequences every event in commit order (releases a cycle
saw come before the grants they made room for), so at every point of the log the capacity held must
fit the pool and no GPU may have two holders."""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from respools.server.reconciler.leadership import LEADER_LOCK_KEY
from tests.server import pg
from tests.server.servers import ServerProcess, start_server, wait_ready

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

ADMIN = "rp_replica_admin"
REPLICAS = 3
CLIENTS = 12
RUN_S = 12.0
GPUS_PER_HOST = 4
HOSTS = 2
ENDING_EVENTS = {"released", "preempted", "expired", "cancelled"}


@pytest.fixture
def database() -> Iterator[str]:
    reason = pg.unreachable_reason()
    if reason:
        pytest.skip(reason)
    with pg.scratch_database("respools_test_replicas") as url:
        yield url


@pytest.fixture
def servers(database: str, tmp_path: Path) -> Iterator[list[ServerProcess]]:
    started = [start_server(database, ADMIN, tmp_path) for _ in range(REPLICAS)]
    try:
        for server in started:
            wait_ready(server)
        yield started
    finally:
        for server in started:
            server.stop()


class Cluster:
    """Calls any live replica; a replica that dies mid-call is skipped and the call repeated elsewhere
    (every call used here is idempotent: submits carry an idempotency key)."""

    def __init__(self, servers: list[ServerProcess]) -> None:
        self.servers = servers
        self.local = threading.local()

    def _client(self, server: ServerProcess) -> httpx.Client:
        clients: dict[int, httpx.Client] = self.local.__dict__.setdefault("clients", {})
        if server.port not in clients:
            clients[server.port] = httpx.Client(base_url=server.url, timeout=15)
        return clients[server.port]

    def call(self, method: str, path: str, token: str, **kwargs: Any) -> httpx.Response:
        for _ in range(50):
            live = [s for s in self.servers if s.alive()]
            server = random.choice(live)
            try:
                response = self._client(server).request(
                    method, path, headers={"Authorization": f"Bearer {token}"} | kwargs.pop("headers", {}), **kwargs
                )
            except httpx.TransportError:
                time.sleep(0.05)
                continue
            if response.status_code == 503:
                time.sleep(0.05)
                continue
            return response
        raise AssertionError(f"no replica answered {method} {path}")


@dataclass
class Ledger:
    """What clients were told: every acknowledged request and release must be in the store."""

    submitted: set[str] = field(default_factory=set)
    released: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def client_loop(cluster: Cluster, tokens: list[str], stop: threading.Event, ledger: Ledger) -> None:
    try:
        _client_loop(cluster, tokens, stop, ledger)
    except Exception as exc:  # surfaced by the test's assertion, not lost in a thread
        ledger.errors.append(f"client crashed: {exc!r}")


def _client_loop(cluster: Cluster, tokens: list[str], stop: threading.Event, ledger: Ledger) -> None:
    rng = random.Random()
    while not stop.is_set():
        token = rng.choice(tokens)
        spec = {"resources": {"gpu": rng.choice([1, 1, 2])}, "preemptible": rng.random() < 0.7, "max_retries": 1}
        key = uuid.uuid4().hex
        response = cluster.call("POST", "/v1/requests?wait=3", token, json=spec, headers={"Idempotency-Key": key})
        if response.status_code not in (200, 201):
            ledger.errors.append(f"submit {response.status_code} {response.text}")
            return
        request = response.json()
        with ledger.lock:
            ledger.submitted.add(request["id"])
        if request["state"] == "pending":
            cluster.call("POST", f"/v1/requests/{request['id']}/cancel", token)
            continue
        if request["state"] != "granted":
            continue
        lease_id = request["lease_id"]
        for _ in range(2):
            beat = cluster.call("POST", f"/v1/leases/{lease_id}/heartbeat", token)
            if beat.status_code != 200 or beat.json()["state"] == "preempting":
                break
            time.sleep(rng.uniform(0, 0.05))
        released = cluster.call("POST", f"/v1/leases/{lease_id}/release", token)
        if released.status_code != 200:
            ledger.errors.append(f"release {released.status_code} {released.text}")
            return
        with ledger.lock:
            ledger.released.add(lease_id)


def leader_pid(database: str) -> int | None:
    """The backend holding the reconciler's advisory lock (read from pg_locks, not over HTTP, so a
    busy machine does not blur the takeover time)."""
    query = (
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 "
        "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
        "AND ((classid::bigint << 32) | objid::bigint) = %s"
    )
    with psycopg.connect(pg.libpq(database)) as conn:
        row = conn.execute(query, (LEADER_LOCK_KEY,)).fetchone()
    return None if row is None else int(row[0])


def outbox_is_empty(database: str) -> bool:
    with psycopg.connect(pg.libpq(database)) as conn:
        row = conn.execute("SELECT count(*) FROM event_outbox").fetchone()
    return row is not None and row[0] == 0


def replay(database: str, settled: bool = False) -> tuple[int, int]:
    """Walk the event log in order; returns (grants, peak GPUs held in milli-GPU). Once ``settled`` (no
    traffic, outbox drained) the leases the log holds must be exactly those the table calls live; while
    traffic runs, a release may be committed with its event still in the outbox."""
    capacity = HOSTS * GPUS_PER_HOST * 1000
    with psycopg.connect(pg.libpq(database)) as conn:
        # One snapshot for both reads: a grant committed between them would show its event without its lease.
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        leases = {
            row[0]: (row[1], [item["gpu_uuid"] for item in row[2]["items"]], row[3])
            for row in conn.execute("SELECT id, (resources->>'gpu')::int, placement, state FROM leases")
        }
        events = conn.execute("SELECT id, kind, lease_id FROM events ORDER BY id").fetchall()
    held: dict[str, str] = {}
    holding: set[str] = set()
    usage = peak = grants = 0
    for event_id, kind, lease_id in events:
        if kind == "granted":
            gpus, uuids, _ = leases[lease_id]
            usage += gpus
            grants += 1
            for gpu_uuid in uuids:
                assert gpu_uuid not in held, (
                    f"event {event_id}: {gpu_uuid} granted to {lease_id} while {held[gpu_uuid]}"
                )
                held[gpu_uuid] = lease_id
            holding.add(lease_id)
            assert usage <= capacity, f"event {event_id}: {usage} milli-GPU held, capacity {capacity}"
            peak = max(peak, usage)
        elif kind in ENDING_EVENTS and lease_id in holding:
            holding.discard(lease_id)
            gpus, uuids, _ = leases[lease_id]
            usage -= gpus
            for gpu_uuid in uuids:
                del held[gpu_uuid]
    if settled:
        live_in_table = {lid for lid, (_, _, state) in leases.items() if state in {"granted", "active", "preempting"}}
        assert holding == live_in_table, "the log and the lease table disagree on which leases are live"
    return grants, peak


def test_replicas_never_grant_twice_and_survive_the_leader(servers: list[ServerProcess], database: str) -> None:
    cluster = Cluster(servers)
    inventory = [
        {
            "name": f"h{h}",
            "gpus": [
                {"uuid": f"GPU-{h}-{g}", "index": g, "model": "NVIDIA A100-SXM4-80GB", "memory_mb": 81920}
                for g in range(GPUS_PER_HOST)
            ],
        }
        for h in range(HOSTS)
    ]
    pool = {"name": "shared", "inventory": inventory, "preemption_grace_s": 0.5, "init_timeout_s": 2, "lease_ttl_s": 5}
    assert cluster.call("PUT", "/v1/pools/shared", ADMIN, json=pool).status_code == 201
    tokens = []
    for i, priority in enumerate([10, 20, 30]):
        subject = f"team-{i}"
        assert cluster.call("PUT", f"/v1/subjects/{subject}", ADMIN, json={"name": subject}).status_code == 201
        policy = {"subject": subject, "pool": "shared", "reserved": {"gpu": 2}, "priority": priority}
        assert cluster.call("POST", "/v1/policies", ADMIN, json=policy).status_code == 201
        tokens.append(
            cluster.call("POST", "/v1/tokens", ADMIN, json={"role": "subject", "subject": subject}).json()["token"]
        )

    roles = [s.role() for s in servers]
    assert roles.count("leader") == 1 and roles.count("follower") == REPLICAS - 1, roles

    ledger = Ledger()
    stop = threading.Event()
    threads = [threading.Thread(target=client_loop, args=(cluster, tokens, stop, ledger)) for _ in range(CLIENTS)]
    for thread in threads:
        thread.start()
    time.sleep(RUN_S / 2)
    leader = next(s for s in servers if s.role() == "leader")
    grants_before = replay(database)[0]
    old_lock_holder = leader_pid(database)
    assert old_lock_holder is not None
    leader.kill()
    killed_at = time.monotonic()
    while leader_pid(database) in (None, old_lock_holder):
        assert time.monotonic() - killed_at < 5, "no replica took over the reconciler within 5 s"
        time.sleep(0.05)
    takeover_s = time.monotonic() - killed_at
    time.sleep(RUN_S / 2)
    stop.set()
    for thread in threads:
        thread.join(60)
    assert not ledger.errors, ledger.errors[:5]

    # Let requeued and unstarted leases run out, then check the whole history.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        live = cluster.call("GET", "/v1/leases?live=true", ADMIN).json()
        pending = cluster.call("GET", "/v1/requests?state=pending", ADMIN).json()
        if not live and not pending and outbox_is_empty(database):
            break
        time.sleep(0.5)
    grants, peak = replay(database, settled=True)
    assert grants > grants_before > 20, (grants_before, grants)
    assert peak > 0
    with psycopg.connect(pg.libpq(database)) as conn:
        stored = {row[0]: row[1] for row in conn.execute("SELECT id, state FROM requests")}
        lease_states: dict[str, str] = dict(conn.execute("SELECT id, state FROM leases").fetchall())
        submitted_events = {row[0] for row in conn.execute("SELECT request_id FROM events WHERE kind = 'submitted'")}
    assert ledger.submitted <= set(stored), "an acknowledged request is missing"
    assert ledger.submitted <= submitted_events, "an acknowledged request has no 'submitted' event"
    assert all(lease_states[lease] in {"released", "preempted"} for lease in ledger.released)
    assert not [r for r, state in stored.items() if state in {"pending", "granted", "active", "preempting"}]
    print(f"{len(ledger.submitted)} requests, {grants} grants, peak {peak / 1000:g} GPUs, takeover {takeover_s:.2f} s")
