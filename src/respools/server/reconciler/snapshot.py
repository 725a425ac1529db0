"""Loading a cycle's snapshot: the live leases (what changed of them, :mod:`.live_leases`), the pending
requests, and the cached definitions. Rows become models without re-validation (see
:mod:`respools.server.codec`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from respools.model import PoolSpec
from respools.scheduling import Snapshot
from respools.server.codec import request_of
from respools.server.db.statements import PENDING_REQUESTS
from respools.server.definitions import Definitions
from respools.server.reconciler.live_leases import LiveLeases


@dataclass(frozen=True, slots=True)
class CycleInput:
    snapshot: Snapshot
    definitions: Definitions
    pools: dict[str, PoolSpec]
    """Effective pools by name, as the core saw them."""
    queued_at: dict[str, datetime]
    """When each pending request last entered the queue (for the grant-latency histogram)."""
    wait_pool: dict[str, str | None]
    """The pool each pending request was last seen waiting on (to skip unchanged wait records)."""


def load_snapshot(
    conn: sa.Connection, definitions: Definitions, now: datetime, live: LiveLeases | None = None
) -> CycleInput:
    """``live`` is what the leader kept of the live leases from its last cycle (none: read them all),
    and then also sums them for the core."""
    kept = live if live is not None else LiveLeases()
    leases = kept.load(conn)
    # all(): one fetchall per query; iterating a result fetches its rows one driver call at a time
    queued_at: dict[str, datetime] = {}
    wait_pool: dict[str, str | None] = {}
    requests = []
    for row in conn.execute(PENDING_REQUESTS).mappings().all():
        request = request_of(row)
        requests.append(request)
        queued_at[request.id] = row["queued_at"]
        wait_pool[request.id] = row["wait_pool"]
    pools = definitions.effective_pools(now)
    snapshot = Snapshot(
        now=now,
        pools=pools,
        policies=definitions.policies,
        leases=leases,
        requests=requests,
        reservations=definitions.active_reservations(now),
        books=kept.books(now) if live is not None else None,
    )
    return CycleInput(snapshot, definitions, {p.name: p for p in pools}, queued_at, wait_pool)
