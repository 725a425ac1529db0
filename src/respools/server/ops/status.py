"""Where each pool stands: capacity, use, borrowing, queue — for ``GET /v1/pools/{pool}/status`` and
the Prometheus gauges (computed from the store at read time, so every replica reports the same)."""

from __future__ import annotations

from collections import Counter
from datetime import datetime

import sqlalchemy as sa

from respools.model import RequestState
from respools.scheduling import pool_capacity
from respools.server.db.database import Database, utcnow
from respools.server.db.tables import LEASES, LIVE_STATES_SQL, PENDING_SQL, REQUESTS
from respools.server.definitions import DefinitionsCache
from respools.server.errors import not_found
from respools.server.schemas import PoolStatus


def _add(target: dict[str, int], vector: dict[str, int]) -> None:
    for key, amount in vector.items():
        target[key] = target.get(key, 0) + amount


def pool_statuses(db: Database, cache: DefinitionsCache, only: str | None = None) -> list[PoolStatus]:
    definitions = db.read(cache.get().with_fresh_hosts)
    if only is not None and only not in definitions.pools:
        raise not_found("pool", only, "pool")

    def read(
        conn: sa.Connection,
    ) -> tuple[list[sa.Row[tuple[str, str, dict[str, int], dict[str, int], datetime | None]]], Counter[str]]:
        leases = sa.select(
            LEASES.c.pool, LEASES.c.state, LEASES.c.resources, LEASES.c.borrowed, LEASES.c.overdue_since
        ).where(sa.text(LIVE_STATES_SQL))
        if only is not None:
            leases = leases.where(LEASES.c.pool == only)
        waiting = (
            sa.select(REQUESTS.c.wait_pool, sa.func.count()).where(sa.text(PENDING_SQL)).group_by(REQUESTS.c.wait_pool)
        )
        return list(conn.execute(leases)), Counter({row[0] or "": int(row[1]) for row in conn.execute(waiting)})

    live, waiting = db.read(read)
    now = utcnow()
    in_use: dict[str, dict[str, int]] = {}
    borrowed: dict[str, dict[str, int]] = {}
    counts: Counter[tuple[str, str]] = Counter()
    overdue: Counter[str] = Counter()
    for pool, state, resources, lent, overdue_since in live:
        _add(in_use.setdefault(pool, {}), resources)
        _add(borrowed.setdefault(pool, {}), lent)
        counts[(pool, state)] += 1
        if overdue_since is not None:
            overdue[pool] += 1
    statuses = []
    for name in sorted(definitions.pools) if only is None else [only]:
        pool = definitions.effective_pool(name, now)
        capacity = pool_capacity(pool)
        used = in_use.get(name, {})
        reports = definitions.hosts.get(name, [])
        live_hosts = sum(1 for r in reports if r.live_at(now))
        statuses.append(
            PoolStatus.model_construct(
                name=name,
                stack=pool.stack,
                draining=pool.draining,
                capacity=capacity,
                in_use=used,
                borrowed=borrowed.get(name, {}),
                free={k: max(0, v - used.get(k, 0)) for k, v in capacity.items()},
                live_leases=sum(n for (p, _), n in counts.items() if p == name),
                preempting_leases=counts[(name, RequestState.PREEMPTING.value)],
                overdue_leases=overdue[name],
                waiting_requests=waiting.get(name, 0),
                live_hosts=live_hosts,
                lost_hosts=len(reports) - live_hosts,
            )
        )
    return statuses
