"""Held-leases benchmark: N leases held at once, heartbeat and preemption-notice latency, server cost.

What grows with a fleet is the number of leases held at once: each holder heartbeats every third of the
TTL and keeps a long-poll open between beats so that notice reaches it in milliseconds. This script
starts ``respools server`` on a scratch PostgreSQL database (``--replicas`` servers on the same
database, holders spread over them), acquires ``--leases`` leases, and holds them for ``--hold``
seconds through the REST lease protocol exactly as the SDK's :class:`~respools.client.monitor.LeaseMonitor`
drives it — ``POST /v1/leases/{id}/heartbeat`` every ``--interval`` seconds (20 s: a third of the
default 60 s TTL; on the monitor's :class:`~respools.client.monitor.BeatSchedule`) and
``GET /v1/requests/{id}/wait?state=active&timeout=<until the next beat>`` between beats — or, with
``--batch``, as the SDK's multi-lease holder does (one batch heartbeat and one watch long-poll per
generator connection group). During the hold it preempts ``--preempt`` leases
through the admin API and measures when each holder hears of it.

It prints heartbeat p50/p99, notice p50/p99/max, errors, the CPU of the server processes and of
PostgreSQL (the backends of the scratch database), the server's memory, the database's transactions and
rows per held lease per second, and the load generator's own CPU and event-loop lag.

**The load generator.** httpx's async pool stalls past about a thousand connections (heartbeat p99 of
16 s with the server idle), and a thread per holder does not reach ten thousand. Each holder here is one
keep-alive HTTP/1.1 connection on raw asyncio streams (uvloop when installed), requests written by hand
(:class:`service.Connection`'s approach), spread over ``--generators`` processes. Each generator
measures its own CPU and how late its event loop wakes (a 100 ms ticker): when that lag is not small
against the latencies measured, the figures are the generator's, not the server's, and the table says so.

    python benchmarks/held_leases.py --leases 1000 --hold 60
    python benchmarks/held_leases.py --leases 10000 --hold 60 --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import multiprocessing as mp
import os
import random
import signal
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import psycopg

from respools.client.monitor import BeatSchedule

sys.path.insert(0, str(Path(__file__).resolve().parent))
from service import ADMIN_TOKEN, DEFAULT_PG, Connection, define_world, percentile, scratch_database, server

REQUEST = {"resources": {"gpu": 1}, "preemptible": True}
ACQUIRE_CONCURRENCY = 64
"""Submissions in flight per generator while acquiring: enough to keep the reconciler's batches full."""
RETRY_PAUSE_S = 0.5
"""As the SDK's monitor: the pause after a failed call."""
TICK_S = 0.1
EARLY_S = 0.5
"""A long-poll answered unchanged this long before its timeout counts as woken early."""
NOTICE_GRACE_S = 600.0
"""Grace given to the preempted leases: longer than any hold, so none is revoked mid-run."""


# -- one generator process -------------------------------------------------------------------------


@dataclass
class Samples:
    """What one generator saw inside the measured window."""

    heartbeats_ms: list[float] = field(default_factory=list)
    notices: dict[str, float] = field(default_factory=dict)
    """Lease id → ``time.time()`` when its holder heard of its notice."""
    errors: dict[str, int] = field(default_factory=dict)
    held: int = 0
    acquire_errors: int = 0
    cpu_s: float = 0.0
    lag_ms: list[float] = field(default_factory=list)
    calls: int = 0
    early_waits: int = 0
    """Long-polls answered "still active" well before their timeout: woken by news that was not theirs."""

    def error(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1


class Window:
    """The measured stretch: opens when the coordinator says go, closes ``hold`` seconds later."""

    def __init__(self, hold: float) -> None:
        self.hold = hold
        self.start: float | None = None
        self.end: float | None = None

    def open(self) -> None:
        self.start = time.monotonic()
        self.end = self.start + self.hold

    def inside(self, at: float) -> bool:
        return self.start is not None and self.end is not None and self.start <= at <= self.end

    def over(self, at: float) -> bool:
        return self.end is not None and at >= self.end


async def acquire(conn: Connection, samples: Samples, gate: asyncio.Semaphore) -> tuple[str, str] | None:
    """Submit a request, wait for its grant, activate its lease with the first heartbeat (as
    :meth:`Holding.activate` does). Returns the request and lease ids."""
    async with gate:
        for _ in range(5):
            try:
                status, request = await conn.call("POST", "/v1/requests?wait=120", REQUEST)
                if status in (200, 201) and request["state"] == "granted":
                    lease_id: str = request["lease_id"]
                    status, _ = await conn.call("POST", f"/v1/leases/{lease_id}/heartbeat")
                    if status == 200:
                        return request["id"], lease_id
            except (OSError, asyncio.IncompleteReadError, ValueError):
                conn.close()
            await asyncio.sleep(RETRY_PAUSE_S)
    samples.acquire_errors += 1
    return None


async def hold_one(
    conn: Connection, request_id: str, lease_id: str, interval: float, window: Window, samples: Samples
) -> None:
    """The SDK monitor's loop (:meth:`LeaseMonitor._run`) for one lease, until the window closes."""
    loop = asyncio.get_running_loop()  # its clock is the monitor's, time.monotonic()
    beats = BeatSchedule(interval, loop.time(), first_in=random.uniform(0, interval))  # started at different times
    while not window.over(loop.time()):
        now = loop.time()
        try:
            if now >= beats.due:
                started = time.perf_counter()
                status, lease = await conn.call("POST", f"/v1/leases/{lease_id}/heartbeat")
                if window.inside(loop.time()):
                    samples.calls += 1
                    samples.heartbeats_ms.append(1000 * (time.perf_counter() - started))
                if status != 200:
                    samples.error(f"heartbeat {status}")
                    if status in (404, 409):
                        return
                    await asyncio.sleep(RETRY_PAUSE_S)
                    continue
                if lease["state"] == "preempting":
                    samples.notices.setdefault(lease_id, time.time())
                    await conn.call("POST", f"/v1/leases/{lease_id}/release")
                    return
                beats.beaten(loop.time())
                continue
            until = max(0.05, min(beats.due, window.end or beats.due) - now)
            status, request = await conn.call("GET", f"/v1/requests/{request_id}/wait?state=active&timeout={until:.3f}")
            if window.inside(loop.time()):
                samples.calls += 1
                early = status == 200 and request["state"] == "active" and loop.time() - now < until - EARLY_S
                samples.early_waits += early
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            samples.error(type(exc).__name__)
            conn.close()
            await asyncio.sleep(RETRY_PAUSE_S)
            continue
        if status != 200:
            samples.error(f"wait {status}")
            await asyncio.sleep(RETRY_PAUSE_S)
            continue
        if request["state"] == "active" and request["lease_id"] == lease_id:
            continue
        if request["state"] == "preempting":
            samples.notices.setdefault(lease_id, time.time())
            # As the SDK: read the lease's notice, then (the step stopped) release it.
            await conn.call("GET", f"/v1/leases/{lease_id}")
            await conn.call("POST", f"/v1/leases/{lease_id}/release")
            return
        samples.error(f"ended {request['state']}")
        return


@dataclass
class BatchGroup:
    """The leases one multi-lease holder keeps (those acquired through one replica): filled while the
    leases are acquired, so that each is renewed from its grant on, as the SDK's keeper renews a lease
    from :meth:`~respools.client.keeper.LeaseKeeper.add` on."""

    lease_of: dict[str, str] = field(default_factory=dict)
    """Request id → lease id."""
    live: set[str] = field(default_factory=set)

    def add(self, request_id: str, lease_id: str) -> None:
        self.lease_of[request_id] = lease_id
        self.live.add(lease_id)


async def batch_beats(
    conn: Connection, group: BatchGroup, interval: float, window: Window, samples: Samples, max_ids: int
) -> None:
    """The keeper's heartbeats: every ``interval``, every live lease of ``group`` in batches of
    ``max_ids`` on ``conn``, from the first acquisition until the window closes."""
    loop = asyncio.get_running_loop()
    next_beat = loop.time() + interval
    while not window.over(loop.time()):
        await asyncio.sleep(max(0.0, min(next_beat, window.end or next_beat) - loop.time()))
        if window.over(loop.time()):
            return
        ids = sorted(group.live)
        for chunk in range(0, len(ids), max_ids):
            started = time.perf_counter()
            try:
                status, answer = await conn.call(
                    "POST", "/v1/leases/heartbeat", {"lease_ids": ids[chunk : chunk + max_ids]}
                )
            except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
                samples.error(type(exc).__name__)
                conn.close()
                continue
            if window.inside(loop.time()):
                samples.calls += 1
                samples.heartbeats_ms.append(1000 * (time.perf_counter() - started))
            if status != 200:
                samples.error(f"batch heartbeat {status}")
                continue
            for lease in answer["leases"]:
                if lease["state"] == "preempting" and lease["id"] in group.live:
                    samples.notices.setdefault(lease["id"], time.time())
            for error in answer["errors"]:
                if error["id"] in group.live:  # else released by its watch while this batch was out
                    samples.error(f"heartbeat item {error['status']}")
                    group.live.discard(error["id"])
        next_beat = loop.time() + interval


async def batch_watch(
    watch: Connection, release: Connection, group: BatchGroup, requests: list[str], window: Window, samples: Samples
) -> None:
    """The keeper's watch of ``requests`` (at most a thousand) on ``watch``; a lease under notice is
    released on ``release`` (the heartbeats' connection)."""
    loop = asyncio.get_running_loop()
    seen = dict.fromkeys(requests, "active")
    while not window.over(loop.time()) and any(group.lease_of[r] in group.live for r in seen):
        until = max(0.05, (window.end or loop.time() + 20) - loop.time())
        watched = {r: s for r, s in seen.items() if group.lease_of[r] in group.live}
        try:
            status, answer = await watch.call(
                "POST", "/v1/requests/watch", {"requests": watched, "timeout": min(until, 20.0)}
            )
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            samples.error(type(exc).__name__)
            watch.close()
            await asyncio.sleep(RETRY_PAUSE_S)
            continue
        samples.calls += window.inside(loop.time())
        if status != 200:
            samples.error(f"watch {status}")
            await asyncio.sleep(RETRY_PAUSE_S)
            continue
        for request in answer["requests"]:
            seen[request["id"]] = request["state"]
            lease_id = group.lease_of[request["id"]]
            if lease_id not in group.live:
                continue
            if request["state"] == "preempting":
                samples.notices.setdefault(lease_id, time.time())
                group.live.discard(lease_id)
                try:
                    await release.call("POST", f"/v1/leases/{lease_id}/release")
                except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
                    samples.error(type(exc).__name__)
                    release.close()
            elif request["state"] != "active":
                samples.error(f"ended {request['state']}")
                group.live.discard(lease_id)


async def ticker(window: Window, samples: Samples) -> None:
    """How late this generator's event loop wakes: its own overhead, next to the latencies it measures."""
    loop = asyncio.get_running_loop()
    while not window.over(loop.time()):
        planned = loop.time() + TICK_S
        await asyncio.sleep(TICK_S)
        if window.inside(loop.time()):
            samples.lag_ms.append(1000 * (loop.time() - planned))


async def generate(urls: list[str], token: str, count: int, args: Any, ready: Any, go: Any, offset: int) -> Samples:
    """Acquire ``count`` leases and hold each from its grant on (a lease waiting for the others to be
    granted would expire), until the window the coordinator opens closes."""
    samples = Samples()
    window = Window(args.hold)
    gate = asyncio.Semaphore(ACQUIRE_CONCURRENCY)
    ends = [url.removeprefix("http://").partition(":") for url in urls]
    source = source_address(ends[0][0], offset)
    conns = [
        Connection(host, int(port), token, source)
        for i in range(count)
        for host, _, port in [ends[(offset + i) % len(ends)]]
    ]

    settled = 0
    groups = [BatchGroup() for _ in ends]
    beaters = [Connection(host, int(port), token, source) for host, _, port in ends]
    tasks: list[asyncio.Task[Any]] = []
    if args.batch:  # renewing from the first grant on: acquiring ten thousand takes longer than a TTL
        for group, conn in zip(groups, beaters, strict=True):
            tasks.append(asyncio.create_task(batch_beats(conn, group, args.interval, window, samples, args.batch)))

    async def one(i: int, conn: Connection) -> tuple[str, str] | None:
        nonlocal settled
        pair = await acquire(conn, samples, gate)
        settled += 1
        if pair is not None and args.batch:
            groups[(offset + i) % len(ends)].add(*pair)
        elif pair is not None:
            await hold_one(conn, *pair, args.interval, window, samples)
        return pair

    holders = [asyncio.create_task(one(i, conn)) for i, conn in enumerate(conns)]
    tasks.extend(holders)
    if args.batch:
        acquired = await asyncio.gather(*holders)
        for conn in conns:
            conn.close()
        for (host, _, port), group, beater in zip(ends, groups, beaters, strict=True):
            requests = list(group.lease_of)
            for start in range(0, len(requests), args.batch):
                watch = Connection(host, int(port), token, source)
                chunk = requests[start : start + args.batch]
                tasks.append(asyncio.create_task(batch_watch(watch, beater, group, chunk, window, samples)))
        samples.held = sum(1 for a in acquired if a is not None)
    else:
        while settled < count:
            await asyncio.sleep(0.1)
        samples.held = count - samples.acquire_errors
    ready.put(samples.held)
    while not go.is_set():
        await asyncio.sleep(0.02)
    window.open()
    tasks.append(asyncio.create_task(ticker(window, samples)))
    cpu = time.process_time()
    await asyncio.gather(*tasks)
    samples.cpu_s = time.process_time() - cpu
    for conn in conns:
        conn.close()
    return samples


def source_address(server_host: str, generator: int) -> str | None:
    """A loopback source address of the generator's own (127.0.0.2, 127.0.0.3…) when the server is on
    loopback: Linux offers each source address its own ephemeral ports (``ip_local_port_range``, about
    28,000), which 30,000 connections from one address to one server port would run out of."""
    return f"127.0.0.{2 + generator}" if server_host == "127.0.0.1" and generator < 250 else None


def generator_main(
    urls: list[str], token: str, count: int, args: Any, ready: Any, go: Any, results: Any, offset: int
) -> None:
    try:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    samples = asyncio.run(generate(urls, token, count, args, ready, go, offset))
    results.put(asdict(samples))


# -- what the server and the database spent ----------------------------------------------------------


@dataclass
class DatabaseWork:
    transactions: int = 0
    rows_fetched: int = 0
    rows_updated: int = 0


def database_counters(dsn: str, name: str) -> tuple[DatabaseWork, list[int]]:
    """The scratch database's transaction and row counters, and the pids of its backends."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT xact_commit + xact_rollback, tup_fetched, tup_updated FROM pg_stat_database WHERE datname = %s",
            (name,),
        ).fetchone()
        pids = [r[0] for r in conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", (name,))]
    assert row is not None
    return DatabaseWork(int(row[0]), int(row[1]), int(row[2])), pids


def cpu_of(pids: list[int]) -> dict[int, float]:
    out: dict[int, float] = {}
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        out[pid] = times.user + times.system
    return out


def run_queue_wait(processes: list[psutil.Process]) -> float:
    """Seconds the main threads of ``processes`` spent runnable but not running (``/proc/PID/schedstat``,
    Linux only; 0 elsewhere)."""
    total = 0.0
    for process in processes:
        try:
            total += int(Path(f"/proc/{process.pid}/schedstat").read_text().split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            continue
    return total


def tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


@dataclass
class Figures:
    leases: int
    held: int
    replicas: int
    workers: int
    generators: int
    mode: str
    hold_s: float
    interval_s: float
    heartbeats: int
    heartbeat_p50_ms: float
    heartbeat_p99_ms: float
    heartbeat_max_ms: float
    preempted: int
    noticed: int
    notice_p50_ms: float
    notice_p99_ms: float
    notice_max_ms: float
    errors: int
    error_kinds: dict[str, int]
    acquire_s: float
    server_cpu: float
    """Cores busy in the server processes over the window (1.0: one core, all the time)."""
    database_cpu: float
    """… in the scratch database's PostgreSQL backends."""
    server_cpu_wait: float
    """Seconds per second the server processes' main threads (the event loops) were ready to run and
    waited for a CPU: on a shared 2-core machine, latency that is the machine's rather than the server's."""
    server_rss_mb: float
    db_transactions_per_s: float
    db_rows_fetched_per_s: float
    db_rows_updated_per_s: float
    server_cpu_us_per_lease_s: float
    """Server CPU microseconds per held lease per second."""
    database_cpu_us_per_lease_s: float
    db_transactions_per_lease_s: float
    generator_cpu: float
    generator_lag_p99_ms: float
    generator_lag_max_ms: float
    calls_per_s: float
    early_waits_per_s: float
    machine_busy: float
    cpu_count: int = field(default_factory=lambda: os.cpu_count() or 0)


def run(args: argparse.Namespace) -> Figures:
    generators = args.generators or max(1, math.ceil(args.leases / 8000))
    with ExitStack() as stack:
        logs = args.logs or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="respools-held-")))
        db_url = stack.enter_context(scratch_database(args.pg, "respools_held"))
        db_name = db_url.rsplit("/", 1)[1]
        leader = [stack.enter_context(server(db_url, 1, logs, ready_s=300))] if args.leader_apart else []
        served = [
            stack.enter_context(server(db_url, args.workers, logs, ready_s=300, reconciler=not args.leader_apart))
            for _ in range(args.replicas)
        ]
        urls = [s.url for s in served]
        token = define_world(urls[0])
        ctx = mp.get_context("spawn")
        ready, results, go = ctx.Queue(), ctx.Queue(), ctx.Event()
        shares = [args.leases // generators + (1 if i < args.leases % generators else 0) for i in range(generators)]
        started = time.monotonic()
        procs = [
            ctx.Process(target=generator_main, args=(urls, token, share, args, ready, go, results, i), daemon=True)
            for i, share in enumerate(shares)
        ]
        for p in procs:
            p.start()
        held = sum(ready.get(timeout=args.acquire_timeout) for _ in procs)
        acquire_s = time.monotonic() - started
        time.sleep(min(5.0, args.interval / 4))  # let the first beats after acquisition settle
        admin = stack.enter_context(
            httpx.Client(base_url=urls[0], headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=30)
        )
        live = admin.get("/v1/leases", params={"live": "true", "limit": 1000}).json()
        victims = random.sample([lease["id"] for lease in live], min(args.preempt, len(live)))

        servers = [p for s in [*leader, *served] for p in tree(s.pid)]
        server_cpu_before = sum(p.cpu_times().user + p.cpu_times().system for p in servers)
        waited_before = run_queue_wait(servers)
        work_before, pids = database_counters(args.pg, db_name)
        db_cpu_before = cpu_of(pids)
        psutil.cpu_percent()
        window_start = time.monotonic()
        go.set()
        sent: dict[str, float] = {}
        for i, victim in enumerate(victims):
            at = window_start + args.hold * (0.2 + 0.6 * i / max(1, len(victims)))
            time.sleep(max(0.0, at - time.monotonic()))
            sent[victim] = time.time()
            answer = admin.post(f"/v1/leases/{victim}/preempt", json={"grace_s": NOTICE_GRACE_S, "message": "bench"})
            answer.raise_for_status()
        time.sleep(max(0.0, window_start + args.hold - time.monotonic()))
        window = time.monotonic() - window_start
        server_cpu = sum(p.cpu_times().user + p.cpu_times().system for p in servers) - server_cpu_before
        waited = run_queue_wait(servers) - waited_before
        rss = sum(p.memory_info().rss for p in servers)
        machine_busy = psutil.cpu_percent() / 100
        work_after, pids_after = database_counters(args.pg, db_name)
        db_after = cpu_of(pids_after)
        db_cpu = sum(cpu - db_cpu_before.get(pid, 0.0) for pid, cpu in db_after.items())
        collected = [results.get(timeout=args.hold + 120) for _ in procs]
        for p in procs:
            p.join(10)

    beats = [ms for s in collected for ms in s["heartbeats_ms"]]
    lag = [ms for s in collected for ms in s["lag_ms"]]
    heard = {lease: at for s in collected for lease, at in s["notices"].items()}
    notices = [1000 * (heard[v] - sent[v]) for v in sent if v in heard]
    kinds: dict[str, int] = {}
    for s in collected:
        for kind, n in s["errors"].items():
            kinds[kind] = kinds.get(kind, 0) + n
    acquire_errors = sum(s["acquire_errors"] for s in collected)
    if acquire_errors:
        kinds["acquire"] = acquire_errors
    lease_s = max(1, held) * window
    return Figures(
        leases=args.leases,
        held=held,
        replicas=args.replicas,
        workers=args.workers,
        generators=generators,
        mode=(f"batch of {args.batch}" if args.batch else "one lease per connection")
        + (", leader apart" if args.leader_apart else ""),
        hold_s=window,
        interval_s=args.interval,
        heartbeats=len(beats),
        heartbeat_p50_ms=percentile(beats, 0.5),
        heartbeat_p99_ms=percentile(beats, 0.99),
        heartbeat_max_ms=max(beats, default=float("nan")),
        preempted=len(sent),
        noticed=len(notices),
        notice_p50_ms=percentile(notices, 0.5),
        notice_p99_ms=percentile(notices, 0.99),
        notice_max_ms=max(notices, default=float("nan")),
        errors=sum(kinds.values()) + len(sent) - len(notices),
        error_kinds=kinds | ({"notice not heard": len(sent) - len(notices)} if len(sent) > len(notices) else {}),
        acquire_s=acquire_s,
        server_cpu=server_cpu / window,
        server_cpu_wait=waited / window,
        database_cpu=db_cpu / window,
        server_rss_mb=rss / 2**20,
        db_transactions_per_s=(work_after.transactions - work_before.transactions) / window,
        db_rows_fetched_per_s=(work_after.rows_fetched - work_before.rows_fetched) / window,
        db_rows_updated_per_s=(work_after.rows_updated - work_before.rows_updated) / window,
        server_cpu_us_per_lease_s=1e6 * server_cpu / lease_s,
        database_cpu_us_per_lease_s=1e6 * db_cpu / lease_s,
        db_transactions_per_lease_s=(work_after.transactions - work_before.transactions) / lease_s,
        generator_cpu=sum(s["cpu_s"] for s in collected) / window,
        generator_lag_p99_ms=percentile(lag, 0.99),
        generator_lag_max_ms=max(lag, default=float("nan")),
        calls_per_s=sum(s["calls"] for s in collected) / window,
        early_waits_per_s=sum(s["early_waits"] for s in collected) / window,
        machine_busy=machine_busy,
    )


def print_table(figures: list[Figures]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"held leases ({os.cpu_count()} CPUs; server, PostgreSQL and load generator on this machine)")
    columns = (
        "held",
        "replicas × workers",
        "mode",
        "heartbeat p50 / p99",
        "notice p50 / p99 / max",
        "errors",
        "server CPU",
        "PostgreSQL CPU",
        "server RSS",
        "DB xact/s",
        "per lease·s: server µs / db µs / db xact",
        "generator CPU / lag p99",
    )
    for column in columns:
        table.add_column(column, justify="right")
    for f in figures:
        table.add_row(
            f"{f.held:,}",
            f"{f.replicas} × {f.workers}",
            f.mode,
            f"{f.heartbeat_p50_ms:.1f} / {f.heartbeat_p99_ms:.1f} ms",
            f"{f.notice_p50_ms:.0f} / {f.notice_p99_ms:.0f} / {f.notice_max_ms:.0f} ms ({f.noticed}/{f.preempted})",
            str(f.errors) + (f" {f.error_kinds}" if f.error_kinds else ""),
            f"{100 * f.server_cpu:.0f}% (wait {100 * f.server_cpu_wait:.0f}%)",
            f"{100 * f.database_cpu:.0f}%",
            f"{f.server_rss_mb:,.0f} MB",
            f"{f.db_transactions_per_s:,.0f}",
            f"{f.server_cpu_us_per_lease_s:.0f} / {f.database_cpu_us_per_lease_s:.0f}"
            f" / {f.db_transactions_per_lease_s:.3f}",
            f"{100 * f.generator_cpu:.0f}% / {f.generator_lag_p99_ms:.0f} ms",
        )
    Console(width=240).print(table)


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # stop the servers and drop the database
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--leases", default="1000", help="held leases; a comma-separated list runs each in turn")
    parser.add_argument("--hold", type=float, default=60.0, help="seconds of measured hold")
    parser.add_argument("--interval", type=float, default=20.0, help="heartbeat interval (the SDK: TTL / 3)")
    parser.add_argument("--preempt", type=int, default=20, help="leases preempted through the admin API")
    parser.add_argument("--workers", type=int, default=2, help="uvicorn workers per server")
    parser.add_argument("--replicas", type=int, default=1, help="servers on the same database")
    parser.add_argument("--generators", type=int, default=0, help="load generator processes (0: one per 8,000)")
    parser.add_argument("--logs", type=Path, default=None, help="keep the servers' logs in this folder")
    parser.add_argument(
        "--leader-apart",
        action="store_true",
        help="run the reconciler in a server process of its own that no holder calls (the replicas serve "
        "with --no-reconciler)",
    )
    parser.add_argument(
        "--batch",
        type=int,
        default=0,
        help="hold as the SDK's multi-lease holder: batch heartbeats of this many ids and one watch stream",
    )
    parser.add_argument("--acquire-timeout", type=float, default=600.0)
    parser.add_argument("--pg", default=os.environ.get("RESPOOLS_BENCH_PG", DEFAULT_PG), help="admin DSN")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    figures = []
    for n in (int(x) for x in args.leases.split(",")):
        args_n = argparse.Namespace(**(vars(args) | {"leases": n}))
        figures.append(run(args_n))
    if args.json:
        print(json.dumps([asdict(f) for f in figures]))
    else:
        print_table(figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
