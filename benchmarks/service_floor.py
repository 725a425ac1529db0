"""The floor under the service benchmark: what the stack respools is built on does on this machine when
it does nothing but the lifecycle's SQL.

``benchmarks/service.py`` measures respools; this measures a skeleton on the same parts — uvicorn,
FastAPI with a pydantic body, psycopg 3 on the same PostgreSQL, the same load generator and the same
three calls per lifecycle — with everything respools adds taken out: no tokens, no scheduler (the submit
grants inline), no idempotency, no notifications, one event row per release. Two variants:

* ``per-call``: each call runs its own transaction (what respools did before group commit);
* ``group-commit``: each worker process queues the calls' writes and commits them in batches, one
  set-based statement per kind of write (the most a writer can batch).

Whatever respools does per lifecycle comes on top of these, so they bound what any goal on this machine
can ask of it.

    python benchmarks/service_floor.py            # a table
    python benchmarks/service_floor.py --json     # one JSON object
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
from pydantic import BaseModel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu_clock import cpu_use
from service import DEFAULT_PG, free_port, load, percentile, scratch_database

SCHEMA = (
    "CREATE TABLE req (id text PRIMARY KEY, subject text, state text, spec jsonb, at timestamptz)",
    "CREATE TABLE lease (id text PRIMARY KEY, request_id text, subject text, state text, at timestamptz, "
    "exp timestamptz)",
    "CREATE TABLE ev (id bigserial PRIMARY KEY, at timestamptz, msg text)",
)
MODES = ("per-call", "group-commit")


# -- the skeleton (imported by each uvicorn worker through create_app) -----------------------------


class Spec(BaseModel):
    """The submit's body, validated as respools validates a request's (at module level, where FastAPI
    resolves the handler's annotations)."""

    resources: dict[str, float]
    preemptible: bool = False


def create_app() -> Any:
    """The skeleton's ASGI app; ``FLOOR_DSN`` and ``FLOOR_MODE`` say where and how it writes."""
    from fastapi import FastAPI

    dsn, mode = os.environ["FLOOR_DSN"], os.environ["FLOOR_MODE"]
    connections: asyncio.Queue[psycopg.AsyncConnection[Any]] = asyncio.Queue()
    writes: asyncio.Queue[tuple[str, Any, asyncio.Future[Any]]] = asyncio.Queue()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        for _i in range(8):
            connections.put_nowait(await psycopg.AsyncConnection.connect(dsn, autocommit=True))
        writer = asyncio.create_task(batch_writer(await psycopg.AsyncConnection.connect(dsn)))
        yield
        writer.cancel()

    app = FastAPI(lifespan=lifespan)

    async def per_call(kind: str, arg: Any) -> Any:
        conn = await connections.get()
        try:
            async with conn.transaction():
                if kind == "submit":
                    request_id, lease_id, spec, now = arg
                    await conn.execute(
                        "INSERT INTO req VALUES (%s, 'bench', 'granted', %s, %s)", (request_id, spec, now)
                    )
                    await conn.execute(
                        "INSERT INTO lease VALUES (%s, %s, 'bench', 'granted', %s)", (lease_id, request_id, now)
                    )
                    return True
                state = "active" if kind == "heartbeat" else "released"
                cursor = await conn.execute(
                    "UPDATE lease SET state = %s, exp = now() + interval '60 s' WHERE id = %s AND subject = 'bench' "
                    "RETURNING id, state",
                    (state, arg),
                )
                row = await cursor.fetchone()
                if kind == "release":
                    await conn.execute("INSERT INTO ev (at, msg) VALUES (now(), %s)", (f"released {arg}",))
                return row
        finally:
            connections.put_nowait(conn)

    async def batch_writer(conn: psycopg.AsyncConnection[Any]) -> None:
        while True:
            batch = [await writes.get()]
            while not writes.empty():
                batch.append(writes.get_nowait())
            submits = [arg for kind, arg, _ in batch if kind == "submit"]
            answers: dict[str, Any] = {}
            async with conn.transaction():
                if submits:
                    await conn.execute(
                        "INSERT INTO req SELECT r, 'bench', 'granted', s, t "
                        "FROM unnest(%s::text[], %s::jsonb[], %s::timestamptz[]) AS u(r, s, t)",
                        ([s[0] for s in submits], [s[2] for s in submits], [s[3] for s in submits]),
                    )
                    await conn.execute(
                        "INSERT INTO lease SELECT l, r, 'bench', 'granted', t "
                        "FROM unnest(%s::text[], %s::text[], %s::timestamptz[]) AS u(l, r, t)",
                        ([s[1] for s in submits], [s[0] for s in submits], [s[3] for s in submits]),
                    )
                for kind, state in (("heartbeat", "active"), ("release", "released")):
                    ids = [arg for k, arg, _ in batch if k == kind]
                    if not ids:
                        continue
                    cursor = await conn.execute(
                        "UPDATE lease SET state = %s, exp = now() + interval '60 s' "
                        "WHERE id = ANY(%s) AND subject = 'bench' RETURNING id, state",
                        (state, ids),
                    )
                    answers.update({row[0]: row for row in await cursor.fetchall()})
                    if kind == "release":
                        events = [f"released {i}" for i in ids]
                        await conn.execute("INSERT INTO ev (at, msg) SELECT now(), unnest(%s::text[])", (events,))
            for kind, arg, future in batch:
                future.set_result(True if kind == "submit" else answers.get(arg))

    async def write(kind: str, arg: Any) -> Any:
        if mode == "per-call":
            return await per_call(kind, arg)
        future = asyncio.get_running_loop().create_future()
        writes.put_nowait((kind, arg, future))
        return await future

    @app.post("/v1/requests", status_code=201)
    async def submit(spec: Spec) -> dict[str, str]:
        request_id, lease_id = "req_" + uuid.uuid4().hex, "lease_" + uuid.uuid4().hex
        await write("submit", (request_id, lease_id, spec.model_dump_json(), dt.datetime.now(dt.UTC)))
        return {"id": request_id, "state": "granted", "lease_id": lease_id}

    @app.post("/v1/leases/{lease_id}/heartbeat")
    async def heartbeat(lease_id: str) -> dict[str, str]:
        row = await write("heartbeat", lease_id)
        return {"id": row[0], "state": row[1]}

    @app.post("/v1/leases/{lease_id}/release")
    async def release(lease_id: str) -> dict[str, str]:
        row = await write("release", lease_id)
        return {"id": row[0], "state": row[1]}

    return app


# -- the measurement -------------------------------------------------------------------------------


def measure(admin_dsn: str, mode: str, workers: int, clients: int, seconds: float) -> dict[str, Any]:
    with scratch_database(admin_dsn, "respools_floor") as database:
        with psycopg.connect(database, autocommit=True) as conn:
            for statement in SCHEMA:
                conn.execute(statement)
        port = free_port()
        env = os.environ | {
            "FLOOR_DSN": database,
            "FLOOR_MODE": mode,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parent), os.environ.get("PYTHONPATH")])),
        }
        # served as `respools server` serves its workers: a listening socket each (respools.server.listeners)
        serve = (
            "import uvicorn; from respools.server.listeners import run_workers; "
            f"run_workers(uvicorn.Config('service_floor:create_app', factory=True, port={port}, workers={workers}, "
            "log_level='warning', access_log=False))"
        )
        command = [sys.executable, "-c", serve]
        server = subprocess.Popen(command, env=env, start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    httpx.get(f"{url}/docs", timeout=2).raise_for_status()
                    break
                except httpx.HTTPError:
                    if time.monotonic() > deadline or server.poll() is not None:
                        raise RuntimeError("the skeleton did not start") from None
                    time.sleep(0.2)
            asyncio.run(load(url, "unused", 4, 1.0))
            with cpu_use(server.pid, database=True) as cpu:
                count, latencies, errors, elapsed = asyncio.run(load(url, "unused", clients, seconds))
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(15)
    return {
        "mode": mode,
        "server_processes": workers,
        "clients": clients,
        "lifecycles_per_s": count / elapsed,
        "submit_p50_ms": 1000 * percentile(latencies, 0.5),
        "submit_p99_ms": 1000 * percentile(latencies, 0.99),
        "errors": errors,
        **cpu.per(count),
        "machine_busy": cpu.machine_busy,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--duration", type=float, default=8.0, help="seconds of load per variant")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="server processes")
    parser.add_argument("--pg", default=os.environ.get("RESPOOLS_BENCH_PG", DEFAULT_PG), help="admin DSN")
    args = parser.parse_args(argv)
    figures = [measure(args.pg, mode, args.workers, args.clients, args.duration) for mode in MODES]
    if args.json:
        print(json.dumps({"cpu_count": os.cpu_count(), "figures": figures}))
        return 0
    print(f"skeleton floor ({os.cpu_count()} CPUs; server, clients and PostgreSQL on this machine)")
    for f in figures:
        print(
            f"  {f['mode']:>12}: {f['lifecycles_per_s']:7,.0f} lifecycles/s  submit p50 {f['submit_p50_ms']:.1f} ms  "
            f"p99 {f['submit_p99_ms']:.1f} ms  ({f['server_processes']} processes, {f['clients']} clients, "
            f"{f['errors']} errors)\n{'':>16}CPU per lifecycle: server {f['server_cpu_ms']:.2f} ms, PostgreSQL "
            f"{f['database_cpu_ms']:.2f} ms, load {f['client_cpu_ms']:.2f} ms; "
            f"machine {100 * f['machine_busy']:.0f}% busy; every core busy: {f['cpu_ceiling_per_s']:,.0f} lifecycles/s"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
