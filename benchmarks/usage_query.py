"""Usage queries on a long history: ``GET /v1/usage`` and a ``/metrics`` scrape over many lease rows.

The script creates a scratch PostgreSQL database (127.0.0.1:5432 by default, dropped afterwards), starts
``respools server`` on it (which migrates it), loads ``--leases`` ended lease rows spread over
``--days`` days (COPY, so loading is not what is timed), waits until the leader has summed them into the
usage roll-up (``server/usage_rollup.py``; the wait is reported, as ``rollup_s``: what an upgrade of such
a history costs once), then times, each ``--repeat`` times, through HTTP as a user would:

* ``GET /v1/usage`` for the last 30 days by subject and pool, by subject and day, and the last day by hour;
* ``GET /metrics`` (the ``respools_usage_gpu_seconds_total`` counters cover the whole history);
* ``GET /ui/utilization.json``: the dashboard's utilization series (the last hour), on every refresh.

    python benchmarks/usage_query.py                      # 1,000,000 leases over 90 days, a table
    python benchmarks/usage_query.py --leases 200000 --json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import psycopg
from psycopg import sql

SRC = str(Path(__file__).resolve().parent.parent / "src")
sys.path.insert(0, SRC)

from respools.server.process import ServerProcess  # noqa: E402

ADMIN_DSN = os.environ.get("RESPOOLS_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
ADMIN_TOKEN = "rp_bench_usage_admin"
SUBJECTS = 40
POOLS = 8
COLUMNS = (
    "id, request_id, subject, pool, stack, state, resources, borrowed, placement, preemptible, priority, "
    "attempt, labels, granted_at, grant_seq, expires_at, released_at, checkpointed_at, checkpoints"
)


@contextmanager
def scratch_database() -> Iterator[tuple[str, str]]:
    name = f"respools_bench_usage_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    base = ADMIN_DSN.rpartition("/")[0]
    try:
        yield f"{base}/{name}", f"{base.replace('postgresql://', 'postgresql+psycopg://')}/{name}"
    finally:
        with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))


def load(dsn: str, leases: int, days: int, now: datetime, seed: int = 7) -> float:
    """COPY ``leases`` ended leases (1–8 GPUs, minutes to hours, 10 % preempted, half of those after a
    checkpoint) granted over the last ``days`` days; returns the seconds it took."""
    rng = random.Random(seed)
    started = time.perf_counter()
    with psycopg.connect(dsn) as conn, conn.cursor() as cursor:
        with cursor.copy(f"COPY leases ({COLUMNS}) FROM STDIN") as copy:
            for i in range(leases):
                granted = now - timedelta(seconds=rng.uniform(3600, days * 86400))
                held = timedelta(seconds=rng.expovariate(1 / 5400))
                released = min(granted + held, now - timedelta(seconds=1))
                gpus = rng.choice((1, 1, 1, 2, 2, 4, 8)) * 1000
                borrowed = {"gpu": gpus // 2} if rng.random() < 0.3 else {}
                preempted = rng.random() < 0.1
                checkpoint = granted + (released - granted) / 2 if preempted and rng.random() < 0.5 else None
                copy.write_row(
                    (
                        f"lease_{i:08d}",
                        f"req_{i:08d}",
                        f"team-{rng.randrange(SUBJECTS):02d}",
                        f"pool-{rng.randrange(POOLS)}",
                        "local",
                        "preempted" if preempted else "released",
                        json.dumps({"gpu": gpus, "step_run": 1}),
                        json.dumps(borrowed),
                        "{}",
                        True,
                        0,
                        0,
                        "{}",
                        granted,
                        0,
                        released,
                        released,
                        checkpoint,
                        1 if checkpoint else 0,
                    )
                )
        conn.execute("ANALYZE leases")
    return time.perf_counter() - started


def wait_rolled_up(dsn: str) -> float:
    """Seconds until no ended lease is left out of the usage roll-up (progress on stderr)."""
    started = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:
            row = conn.execute("SELECT count(*) FROM leases WHERE usage_rolled = 0 AND released_at IS NOT NULL")
            left = row.fetchone()
            if left is None or left[0] == 0:
                # what autovacuum does within a minute of such a bulk update: clear the dead index entries
                # and statistics of a million updated rows (steady state rolls up a few leases at a time)
                conn.execute("VACUUM ANALYZE leases")
                return time.perf_counter() - started
            print(f"  roll-up: {left[0]:,} ended leases left", file=sys.stderr, flush=True)
            time.sleep(5)


def timed(client: httpx.Client, path: str, params: dict[str, str], repeat: int) -> dict[str, float]:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        response = client.get(path, params=params)
        times.append(time.perf_counter() - started)
        response.raise_for_status()
    median, worst = round(statistics.median(times), 3), round(max(times), 3)
    return {"median_s": median, "max_s": worst, "bytes": len(response.content)}


def run(leases: int, days: int, repeat: int) -> dict[str, object]:
    now = datetime.now(UTC)
    with scratch_database() as (dsn, url), tempfile.TemporaryDirectory() as tmp:
        server = ServerProcess(url, ADMIN_TOKEN, Path(tmp) / "server.log", env={"RESPOOLS_LOG_JSON": "false"})
        server.start()
        try:
            load_s = load(dsn, leases, days, now)
            rollup_s = wait_rolled_up(dsn)
            headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
            month = {"since": (now - timedelta(days=30)).isoformat(), "until": now.isoformat()}
            day = {"since": (now - timedelta(days=1)).isoformat(), "until": now.isoformat()}
            with httpx.Client(base_url=server.url, headers=headers, timeout=600) as client:
                queries = {
                    "usage 30 d by subject,pool": timed(client, "/v1/usage", month | {"by": "subject,pool"}, repeat),
                    "usage 30 d by subject,day": timed(client, "/v1/usage", month | {"by": "subject,day"}, repeat),
                    "usage 1 d by subject,pool,hour": timed(
                        client, "/v1/usage", day | {"by": "subject,pool,hour"}, repeat
                    ),
                    "metrics scrape (all history)": timed(client, "/metrics", {}, repeat),
                }
                client.post(
                    "/ui/login",
                    content=f"token={ADMIN_TOKEN}",
                    headers={"Content-Type": "application/x-www-form-urlencoded"},
                )
                queries["dashboard utilization (last hour)"] = timed(client, "/ui/utilization.json", {}, repeat)
        finally:
            server.stop()
    return {
        "leases": leases,
        "days": days,
        "repeat": repeat,
        "load_s": round(load_s, 1),
        "rollup_s": round(rollup_s, 1),
        "queries": queries,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--leases", type=int, default=1_000_000, help="lease rows to load")
    parser.add_argument("--days", type=int, default=90, help="over how many days they were granted")
    parser.add_argument("--repeat", type=int, default=3, help="times each query runs (the median is shown)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = parser.parse_args(argv)
    result = run(args.leases, args.days, args.repeat)
    if args.json:
        print(json.dumps(result))
        return 0
    print(
        f"{result['leases']:,} leases over {result['days']} days on PostgreSQL (loaded in {result['load_s']} s, "
        f"rolled up in {result['rollup_s']} s)"
    )
    print(f"{'query':<34} {'median (s)':>11} {'max (s)':>9} {'bytes':>10}")
    queries = result["queries"]
    assert isinstance(queries, dict)
    for name, row in queries.items():
        print(f"{name:<34} {row['median_s']:>11} {row['max_s']:>9} {row['bytes']:>10,}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
