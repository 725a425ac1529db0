"""What one reconciler cycle costs the leader at N held leases, on PostgreSQL.

At ten thousand held leases the leader's cycle runs every ``tick_s`` (1 s) whether or not anything
happened, in a thread of a server worker whose event loop answers heartbeats under the same GIL: its CPU is
heartbeat latency. ``held_leases.py`` measures the whole service under load; this script isolates the
cycle. It holds ``--leases`` leases on a scratch database (submitted and started through the REST API of
an in-process app), then times ``--cycles`` cycles of the leader in two conditions: *quiet* (nothing
changed since the previous cycle) and *renewing* (a batch heartbeat of ``--renewals`` leases, flushed to
the store, before each cycle: a third of the TTL's worth of holders per second is what a fleet does). It
prints the median thread CPU per cycle and its split (snapshot load, schedule, write).

    python benchmarks/leader_cycle.py --leases 10000
    python benchmarks/leader_cycle.py --leases 10000 --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from service import DEFAULT_PG, scratch_database

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from respools.model import MAX_BATCH_IDS
from respools.server import Settings, create_app
from respools.server.reconciler.cycle import CycleTimings

ADMIN = "rp_bench_leader_cycle"
SUBMITTERS = 16
"""Submissions in flight while setting up: the service commits them in groups."""


def hold(client: TestClient, leases: int) -> tuple[str, list[str]]:
    """``leases`` leases of one GPU each, granted and started; the subject's token and the lease ids."""
    admin = {"Authorization": f"Bearer {ADMIN}"}
    client.put("/v1/pools/fleet", json={"name": "fleet", "capacity": {"gpu": leases}}, headers=admin)
    client.put("/v1/subjects/bench", json={"name": "bench"}, headers=admin)
    client.post("/v1/policies", json={"subject": "bench", "pool": "fleet", "reserved": {"gpu": leases}}, headers=admin)
    token = client.post("/v1/tokens", json={"role": "subject", "subject": "bench"}, headers=admin).json()["token"]
    auth = {"Authorization": f"Bearer {token}"}

    def submit(_: int) -> str:
        answer = client.post("/v1/requests?wait=0", json={"resources": {"gpu": 1}, "preemptible": True}, headers=auth)
        return str(answer.json()["id"])

    with ThreadPoolExecutor(SUBMITTERS) as pool:
        ids = list(pool.map(submit, range(leases)))
    leased: list[str] = []
    deadline = time.monotonic() + 600
    while len(leased) < leases and time.monotonic() < deadline:
        time.sleep(0.5)
        leased = [
            r["lease_id"]
            for start in range(0, leases, MAX_BATCH_IDS)
            for r in client.post(
                "/v1/requests/watch",
                json={"requests": dict.fromkeys(ids[start : start + MAX_BATCH_IDS], "pending"), "timeout": 0},
                headers=auth,
            ).json()["requests"]
            if r.get("lease_id")
        ]
    for start in range(0, len(leased), MAX_BATCH_IDS):
        client.post("/v1/leases/heartbeat", json={"lease_ids": leased[start : start + MAX_BATCH_IDS]}, headers=auth)
    return token, leased


def measure(url: str, leases: int, cycles: int, renewals: int) -> dict[str, Any]:
    settings = Settings(database_url=url, admin_token=ADMIN, tick_s=3600.0, log_json=False, max_wait_s=30.0)
    app = create_app(settings)
    with TestClient(app) as client:
        services = app.state.services
        reconciler = services.reconciler
        reconciler.wake()
        token, leased = hold(client, leases)
        auth = {"Authorization": f"Bearer {token}"}
        loop_runner = asyncio.new_event_loop()

        def cycle() -> CycleTimings:
            timings = CycleTimings()
            if reconciler.run_once(timings) is None:
                raise RuntimeError("the cycle failed or this process does not lead (see the log)")
            return timings

        def timed(before: Any = None) -> list[tuple[float, CycleTimings]]:
            out = []
            for i in range(cycles):
                if before is not None:
                    before(i)
                started = time.thread_time()
                timings = cycle()
                out.append((time.thread_time() - started, timings))
            return out

        cycle()
        quiet = timed()

        def renew(i: int) -> None:
            chosen = leased[(i * renewals) % len(leased) :][:renewals]
            for start in range(0, len(chosen), MAX_BATCH_IDS):
                client.post(
                    "/v1/leases/heartbeat", json={"lease_ids": chosen[start : start + MAX_BATCH_IDS]}, headers=auth
                )
            loop_runner.run_until_complete(services.renewals.flush())

        renewing = timed(renew)
        loop_runner.close()
    return {
        "leases": len(leased),
        "cycles": cycles,
        "renewals": renewals,
        "quiet": summary(quiet),
        "renewing": summary(renewing),
    }


def summary(samples: list[tuple[float, CycleTimings]]) -> dict[str, float]:
    def median_ms(values: list[float]) -> float:
        return round(statistics.median(values) * 1000, 1)

    return {
        "cpu_ms": median_ms([cpu for cpu, _ in samples]),
        "load_ms": median_ms([t.load_s for _, t in samples]),
        "schedule_ms": median_ms([t.schedule_s for _, t in samples]),
        "write_ms": median_ms([t.write_s for _, t in samples]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--leases", type=int, default=10_000)
    parser.add_argument("--cycles", type=int, default=15)
    parser.add_argument("--renewals", type=int, default=500, help="leases renewed before each renewing cycle")
    parser.add_argument("--pg", default=DEFAULT_PG, help="PostgreSQL admin DSN (a scratch database is made)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with scratch_database(args.pg, "respools_leader_cycle") as url:
        result = measure(url, args.leases, args.cycles, args.renewals)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{result['leases']} held leases, median of {result['cycles']} cycles (ms; load+schedule+write is wall)")
    print(f"{'':10} {'cpu':>8} {'load':>8} {'schedule':>9} {'write':>8}")
    for name in ("quiet", "renewing"):
        row = result[name]
        print(f"{name:10} {row['cpu_ms']:8} {row['load_ms']:8} {row['schedule_ms']:9} {row['write_ms']:8}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
