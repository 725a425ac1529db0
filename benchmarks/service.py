"""Service benchmark: lease lifecycles per second and grant latency as a client sees them.

A lifecycle is request → grant → heartbeat → release, three HTTP calls (the submit long-polls until the
grant). For each store (SQLite file, PostgreSQL scratch database) the script starts ``respools server``
in a subprocess, defines a pool with capacity to spare, and measures

* **light load**: one client in a loop — grant latency when capacity is free (submit sent → grant seen);
* **throughput**: many concurrent clients for ``--duration`` seconds — lifecycles/s and latency under load.

With ``pgbench`` on PATH it also initializes a scratch database and reports TPC-B tps from the same run,
so the PostgreSQL figure can be read against what the machine's PostgreSQL does on its own.

    python benchmarks/service.py            # a table
    python benchmarks/service.py --json     # one JSON object
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx
import psycopg
from psycopg import sql
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu_clock import cpu_use

ADMIN_TOKEN = "rp_bench_" + uuid.uuid4().hex
DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/postgres"
SRC = str(Path(__file__).resolve().parent.parent / "src")


@dataclass
class Figures:
    store: str
    lifecycles_per_s: float
    lifecycles: int
    clients: int
    duration_s: float
    grant_p50_ms: float
    grant_p99_ms: float
    light_grant_p50_ms: float
    light_grant_p99_ms: float
    errors: int
    server_processes: int
    server_cpu_ms: float | None = None
    """CPU per lifecycle under load: the server's processes (:mod:`cpu_clock`)."""
    database_cpu_ms: float | None = None
    """… PostgreSQL's processes (``None`` on SQLite, where the database runs inside the server)."""
    client_cpu_ms: float | None = None
    """… this script's own, which generates the load on the same cores."""
    cpu_ceiling_per_s: float | None = None
    """Lifecycles/s with every core busy on this load at these CPU costs: what more clients could reach.
    One server process runs its Python on one core at a time, so with one process (SQLite) it is out of
    reach while the machine is far from busy."""
    machine_busy: float | None = None
    """Share of all cores busy under load, whoever used them."""


@dataclass
class Report:
    figures: list[Figures] = field(default_factory=list)
    pgbench_tps: float | None = None
    pgbench_note: str | None = None
    pg_share_of_pgbench: float | None = None
    cpu_count: int = field(default_factory=lambda: os.cpu_count() or 0)
    load_average_at_start: float = field(default_factory=lambda: os.getloadavg()[0])
    """Other work on the machine competes with the run; figures from a busy machine read low."""


def percentile(samples: list[float], q: float) -> float:
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# -- PostgreSQL scratch databases ------------------------------------------------------------------


@contextmanager
def scratch_database(admin_dsn: str, prefix: str) -> Iterator[str]:
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield make_url(admin_dsn).set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))


def pgbench(admin_dsn: str, seconds: int, clients: int) -> tuple[float | None, str]:
    """TPC-B tps of the local PostgreSQL (pgbench's default script) on a scratch database."""
    if shutil.which("pgbench") is None:
        return None, "pgbench not on PATH"
    with scratch_database(admin_dsn, "respools_pgbench") as url:
        subprocess.run(["pgbench", "-i", "-q", "-s", "10", url], check=True, capture_output=True)
        run = subprocess.run(
            ["pgbench", "-n", "-c", str(clients), "-j", "2", "-T", str(seconds), url],
            check=True,
            capture_output=True,
            text=True,
        )
    match = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", run.stdout)
    if match is None:
        return None, "could not read pgbench's output"
    return float(match.group(1)), f"TPC-B, scale 10, {clients} clients, {seconds} s"


# -- the server under test -------------------------------------------------------------------------


@dataclass(frozen=True)
class Served:
    """A running ``respools server``: where it answers, and its process (its workers are children)."""

    url: str
    pid: int


@contextmanager
def server(
    database_url: str, workers: int, log_dir: Path, ready_s: float = 60.0, reconciler: bool = True
) -> Iterator[Served]:
    port = free_port()
    env = os.environ | {
        "PYTHONPATH": os.pathsep.join(filter(None, [SRC, os.environ.get("PYTHONPATH")])),
        "RESPOOLS_DATABASE_URL": database_url,
        "RESPOOLS_ADMIN_TOKEN": ADMIN_TOKEN,
        "RESPOOLS_LOG_LEVEL": "WARNING",
    }
    command = [
        sys.executable,
        "-c",
        "from respools.cli import app; app()",
        "server",
        "--port",
        str(port),
        "--workers",
        str(workers),
        "--reconciler" if reconciler else "--no-reconciler",
    ]
    log = (log_dir / f"server-{port}.log").open("wb")
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ready_s
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"server exited: see {log.name}")
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError("server did not become ready")
            time.sleep(0.2)
        yield Served(url, process.pid)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
        log.close()


WORLD: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("PUT", "/v1/pools/bench", {"name": "bench", "capacity": {"gpu": 100000}}),
    ("PUT", "/v1/subjects/bench", {"name": "bench"}),
    ("POST", "/v1/policies", {"subject": "bench", "pool": "bench", "reserved": {"gpu": 100000}}),
)
"""The admin's calls that define the world: a pool with room for every client at once, a subject with a
policy. Then :data:`SUBJECT_TOKEN` gives the subject its token."""
SUBJECT_TOKEN = {"role": "subject", "subject": "bench"}


def define_world(url: str) -> str:
    """The :data:`WORLD` on the server at ``url``, and the subject's token."""
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    with httpx.Client(base_url=url, headers=admin, timeout=10) as client:
        for method, path, body in WORLD:
            client.request(method, path, json=body).raise_for_status()
        token: str = client.post("/v1/tokens", json=SUBJECT_TOKEN).json()["token"]
    return token


# -- the load --------------------------------------------------------------------------------------


class Connection:
    """A minimal keep-alive HTTP/1.1 client on asyncio streams.

    httpx's async client spends more CPU per call than the server under test does for a heartbeat (on
    a 2-core machine it caps the whole run at ~250 calls/s), so the load is generated with this: one
    connection per simulated client, requests written by hand, responses framed by Content-Length."""

    def __init__(self, host: str, port: int, token: str, source: str | None = None) -> None:
        self.host, self.port = host, port
        self.local_addr = None if source is None else (source, 0)
        """The address connections leave from: one source address offers ~28,000 ephemeral ports to one
        server port, fewer than the connections of a large held-leases run."""
        self.auth = f"Authorization: Bearer {token}\r\n".encode()
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self._one_at_a_time = asyncio.Lock()

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        async with self._one_at_a_time:  # a holder's release may come while its batch heartbeat is out
            return await self._call(method, path, body)

    async def _call(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        if self.reader is not None and self.reader.at_eof():
            self.close()  # the server closed it while idle (its keep-alive timeout), as httpcore checks
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port, local_addr=self.local_addr)
        assert self.reader is not None
        payload = b"" if body is None else json.dumps(body).encode()
        head = f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Length: {len(payload)}\r\n"
        if payload:
            head += "Content-Type: application/json\r\n"
        self.writer.write(head.encode() + self.auth + b"\r\n" + payload)
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionResetError("the server closed the connection")
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        data = await self.reader.readexactly(length) if length else b""
        return int(status_line.split()[1]), json.loads(data) if data else None

    def close(self) -> None:
        """Close the connection; the next call opens a new one."""
        if self.writer is not None:
            self.writer.close()
            self.writer = None


class Caller(Protocol):
    """What :func:`lifecycle` calls the service through: a keep-alive connection here, the app itself in
    ``service_cpu.py``."""

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]: ...


async def lifecycle(conn: Caller) -> float:
    """One request → grant → heartbeat → release; returns the grant latency in seconds."""
    started = time.perf_counter()
    status, request = await conn.call("POST", "/v1/requests?wait=10", {"resources": {"gpu": 1}, "preemptible": True})
    granted = time.perf_counter()
    if status != 201 or request["state"] != "granted":
        raise RuntimeError(f"not granted: {status} {request}")
    lease = request["lease_id"]
    for action in ("heartbeat", "release"):
        status, _ = await conn.call("POST", f"/v1/leases/{lease}/{action}")
        if status != 200:
            raise RuntimeError(f"{action} answered {status}")
    return granted - started


async def load(url: str, token: str, clients: int, seconds: float) -> tuple[int, list[float], int, float]:
    host, _, port = url.removeprefix("http://").partition(":")
    latencies: list[float] = []
    errors = 0
    deadline = time.perf_counter() + seconds

    async def worker() -> int:
        nonlocal errors
        conn = Connection(host, int(port), token)
        done = 0
        try:
            while time.perf_counter() < deadline:
                try:
                    latencies.append(await lifecycle(conn))
                    done += 1
                except (OSError, RuntimeError, asyncio.IncompleteReadError, ValueError):
                    errors += 1
                    conn.close()
                    conn = Connection(host, int(port), token)
        finally:
            conn.close()
        return done

    started = time.perf_counter()
    counts = await asyncio.gather(*(worker() for _ in range(clients)))
    elapsed = time.perf_counter() - started
    return sum(counts), latencies, errors, elapsed


def measure(store: str, served: Served, clients: int, seconds: float, processes: int) -> Figures:
    url = served.url
    token = define_world(url)
    asyncio.run(load(url, token, 4, 1.0))  # warm up: connections, prepared statements, caches
    _, light, _, _ = asyncio.run(load(url, token, 1, min(5.0, seconds)))
    with cpu_use(served.pid, database=store == "postgres") as cpu:
        count, latencies, errors, elapsed = asyncio.run(load(url, token, clients, seconds))
    return Figures(
        store=store,
        lifecycles_per_s=count / elapsed,
        lifecycles=count,
        clients=clients,
        duration_s=elapsed,
        grant_p50_ms=1000 * percentile(latencies, 0.5),
        grant_p99_ms=1000 * percentile(latencies, 0.99),
        light_grant_p50_ms=1000 * percentile(light, 0.5),
        light_grant_p99_ms=1000 * percentile(light, 0.99),
        errors=errors,
        server_processes=processes,
        **cpu.per(count),
        machine_busy=cpu.machine_busy,
    )


# -- output ----------------------------------------------------------------------------------------


def cpu_split(f: Figures) -> str:
    if f.server_cpu_ms is None or f.client_cpu_ms is None:
        return "—"
    database = "—" if f.database_cpu_ms is None else f"{f.database_cpu_ms:.2f}"
    return f"{f.server_cpu_ms:.2f} + {database} + {f.client_cpu_ms:.2f} ms"


def print_table(report: Report) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"respools service benchmark ({report.cpu_count} CPUs, load average {report.load_average_at_start:.1f} "
        "at start; server, clients and PostgreSQL on this machine)"
    )
    for column in (
        "store",
        "server procs",
        "clients",
        "lifecycles/s",
        "grant p50",
        "grant p99",
        "grant p50 (1 client)",
        "grant p99 (1 client)",
        "errors",
        "CPU/lifecycle: server + db + load",
        "machine busy",
        "all cores busy",
    ):
        table.add_column(column, justify="right" if column != "store" else "left")
    for f in report.figures:
        table.add_row(
            f.store,
            str(f.server_processes),
            str(f.clients),
            f"{f.lifecycles_per_s:,.0f}",
            f"{f.grant_p50_ms:.1f} ms",
            f"{f.grant_p99_ms:.1f} ms",
            f"{f.light_grant_p50_ms:.1f} ms",
            f"{f.light_grant_p99_ms:.1f} ms",
            str(f.errors),
            cpu_split(f),
            "—" if f.machine_busy is None else f"{100 * f.machine_busy:.0f}%",
            "—" if f.cpu_ceiling_per_s is None else f"{f.cpu_ceiling_per_s:,.0f}/s",
        )
    console = Console(width=220)
    console.print(table)
    if report.pgbench_tps is not None:
        share = (
            f" — PostgreSQL lifecycles/s are {100 * report.pg_share_of_pgbench:.0f}% of it"
            if (report.pg_share_of_pgbench is not None)
            else ""
        )
        console.print(f"pgbench: {report.pgbench_tps:,.0f} tps ({report.pgbench_note}){share}")
    else:
        console.print(f"pgbench: not run ({report.pgbench_note})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of load per store")
    parser.add_argument("--clients", type=int, default=32, help="concurrent clients under load")
    parser.add_argument("--stores", default="sqlite,postgres", help="comma-separated: sqlite, postgres")
    parser.add_argument(
        "--pg-workers",
        type=int,
        default=os.cpu_count() or 1,
        help="server processes on PostgreSQL (default: one per core, as a deployment on this machine would run)",
    )
    parser.add_argument("--pg", default=os.environ.get("RESPOOLS_BENCH_PG", DEFAULT_PG), help="admin DSN")
    parser.add_argument("--pgbench-seconds", type=int, default=10)
    args = parser.parse_args(argv)

    report = Report()
    stores = [s.strip() for s in args.stores.split(",") if s.strip()]
    with tempfile.TemporaryDirectory(prefix="respools-bench-") as tmp:
        logs = Path(tmp)
        for store in stores:
            if store == "sqlite":
                with server(f"sqlite:///{logs / 'bench.db'}", 1, logs) as served:
                    report.figures.append(measure("sqlite", served, args.clients, args.duration, 1))
            elif store == "postgres":
                with scratch_database(args.pg, "respools_bench") as db, server(db, args.pg_workers, logs) as served:
                    figures = measure("postgres", served, args.clients, args.duration, args.pg_workers)
                    report.figures.append(figures)
            else:
                parser.error(f"unknown store {store!r}")
        if "postgres" in stores:
            report.pgbench_tps, report.pgbench_note = pgbench(args.pg, args.pgbench_seconds, clients=8)
            pg_figures = next(f for f in report.figures if f.store == "postgres")
            if report.pgbench_tps:
                report.pg_share_of_pgbench = pg_figures.lifecycles_per_s / report.pgbench_tps
        else:
            report.pgbench_note = "PostgreSQL not benchmarked"
    if args.json:
        print(json.dumps(asdict(report), indent=None))
    else:
        print_table(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
