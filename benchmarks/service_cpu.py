"""CPU per lease lifecycle of the whole service, in one process: a figure a noisy machine can compare.

``benchmarks/service.py`` measures what clients see over HTTP, and on a shared 2-core VM its wall-clock
figures swing by a third between runs (pgbench's own tps does too). This runs the app itself — routes,
auth, group commit, reconciler, notifications — in this process and drives it with ASGI calls, so the
CPU it spends per lifecycle (request → grant → heartbeat → release) can be read from the process's own
clock; on PostgreSQL the database's processes are counted beside it. uvicorn's HTTP parsing is not in
the figure; the calls' own JSON is (about 2% of it, by py-spy). The calls are made by hand: httpx's ASGI
transport would add more CPU per call than a heartbeat costs the service.

    python benchmarks/service_cpu.py                   # SQLite and PostgreSQL, a table
    python benchmarks/service_cpu.py --stores sqlite --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu_clock import postgres_cpu_s
from service import ADMIN_TOKEN, DEFAULT_PG, SUBJECT_TOKEN, WORLD, lifecycle, scratch_database


@dataclass
class Figures:
    store: str
    lifecycles: int
    clients: int
    service_cpu_ms: float
    """CPU of this process (every thread) per lifecycle."""
    database_cpu_ms: float | None
    """CPU of the PostgreSQL server's processes per lifecycle (all of them: run it on a quiet server)."""
    lifecycles_per_s: float


class AppCaller:
    """Calls the app as uvicorn would hand them to it, with ``token``: a :class:`service.Caller`."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.authorization = f"Bearer {token}".encode()

    async def call(self, method: str, target: str, body: Any = None) -> tuple[int, Any]:
        payload = b"" if body is None else json.dumps(body).encode()
        path, _, query = target.partition("?")
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": query.encode(),
            "root_path": "",
            "headers": [
                (b"host", b"bench"),
                (b"authorization", self.authorization),
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
            ],
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 80),
            "state": {},
        }
        delivered = False

        async def receive() -> dict[str, Any]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": payload, "more_body": False}
            await asyncio.Event().wait()  # the client never disconnects
            raise AssertionError("unreachable")

        status, chunks = 0, []

        async def send(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        await self.app(scope, receive, send)
        data = b"".join(chunks)
        return status, json.loads(data) if data else None


async def define_world(app: Any) -> str:
    """The benchmark's :data:`service.WORLD` in ``app``, and the subject's token."""
    admin = AppCaller(app, ADMIN_TOKEN)
    for method, path, body in (*WORLD, ("POST", "/v1/tokens", SUBJECT_TOKEN)):
        status, answer = await admin.call(method, path, body)
        if status >= 300:
            raise RuntimeError(f"{method} {path} answered {status}: {answer}")
    return str(answer["token"])


async def measure(store: str, database_url: str, clients: int, per_client: int) -> Figures:
    from respools.server.app import create_app
    from respools.server.gc_tuning import tune_for_serving
    from respools.server.settings import Settings

    app = create_app(Settings(database_url=database_url, admin_token=ADMIN_TOKEN, log_level="WARNING"))
    tune_for_serving()  # as the app factory of ``respools server`` does
    async with app.router.lifespan_context(app):
        token = await define_world(app)

        async def client(count: int) -> None:
            caller = AppCaller(app, token)
            for _ in range(count):
                await lifecycle(caller)

        await asyncio.gather(*(client(5) for _ in range(clients)))  # warm up: connections, statements, caches
        database_before = postgres_cpu_s() if store == "postgres" else None
        cpu_before, wall_before = time.process_time(), time.perf_counter()
        await asyncio.gather(*(client(per_client) for _ in range(clients)))
        cpu, wall = time.process_time() - cpu_before, time.perf_counter() - wall_before
        database = None if database_before is None else postgres_cpu_s() - database_before
    count = clients * per_client
    return Figures(
        store=store,
        lifecycles=count,
        clients=clients,
        service_cpu_ms=1000 * cpu / count,
        database_cpu_ms=None if database is None else 1000 * database / count,
        lifecycles_per_s=count / wall,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--stores", default="sqlite,postgres", help="comma-separated: sqlite, postgres")
    parser.add_argument("--clients", type=int, default=32, help="concurrent clients")
    parser.add_argument("--lifecycles", type=int, default=50, help="lifecycles per client")
    parser.add_argument("--pg", default=os.environ.get("RESPOOLS_BENCH_PG", DEFAULT_PG), help="admin DSN")
    args = parser.parse_args(argv)
    figures: list[Figures] = []
    for store in (s.strip() for s in args.stores.split(",") if s.strip()):
        if store == "sqlite":
            with tempfile.TemporaryDirectory(prefix="respools-bench-") as tmp:
                url = f"sqlite:///{Path(tmp) / 'bench.db'}"
                figures.append(asyncio.run(measure(store, url, args.clients, args.lifecycles)))
        elif store == "postgres":
            with scratch_database(args.pg, "respools_bench") as url:
                figures.append(asyncio.run(measure(store, url, args.clients, args.lifecycles)))
        else:
            parser.error(f"unknown store {store!r}")
    if args.json:
        print(json.dumps({"figures": [asdict(f) for f in figures], "cpu_count": os.cpu_count()}))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title="respools: CPU per lease lifecycle (the whole service in one process, ASGI calls)")
    for column in ("store", "clients", "lifecycles", "service CPU", "PostgreSQL CPU", "lifecycles/s"):
        table.add_column(column, justify="left" if column == "store" else "right")
    for f in figures:
        database = "—" if f.database_cpu_ms is None else f"{f.database_cpu_ms:.2f} ms"
        table.add_row(
            f.store,
            str(f.clients),
            str(f.lifecycles),
            f"{f.service_cpu_ms:.2f} ms",
            database,
            f"{f.lifecycles_per_s:,.0f}",
        )
    Console(width=120).print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
