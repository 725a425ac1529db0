"""Heartbeats of held leases, renewed in memory and written in one statement per interval.

A held lease's holder heartbeats every third of its TTL, and each heartbeat was a write transaction of
its own (lock the row, update its expiry, commit) — at 10,000 held leases, 500 of them a second for
nothing but moving expiries forward. Here a heartbeat of an *active* or *preempting* lease whose stored
expiry is still far off is answered at once from a read of the lease, and its renewal waits in memory;
every :data:`FLUSH_S` one transaction writes all renewals of the interval, one ``UPDATE`` per pool TTL.

**The rule that keeps every promise** (docs/decisions.md, "Heartbeats are renewed in memory"):

* A renewal is held back only while the stored expiry is more than :data:`SYNC_MARGIN_S` away, and only
  for pools whose TTL is at least :data:`MIN_TTL_S`; anything else (the first heartbeat, which starts
  the lease; a holder that beat late; a short TTL) is written before it is answered, as before.
* The expiry answered is the interval's start plus the TTL, never later than what gets written.
* A renewal that never reaches the store (the replica was killed before its flush) costs its holder
  one heartbeat: the stored expiry is still at least ``TTL - interval`` after the holder's previous
  heartbeat, and its next heartbeat, ``TTL / 3`` later at the latest, reaches the store (or another
  replica) first. The SDK's monitor already tolerates two lost heartbeats in a row; this is one.
* A silent holder's lease still expires within TTL plus one reconciler cycle of its last heartbeat,
  or up to :data:`FLUSH_S` sooner: nothing here renews a lease no heartbeat asked to renew.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from datetime import datetime, timedelta

import sqlalchemy as sa
from starlette.concurrency import run_in_threadpool

from respools.model import HeartbeatOutcomes, ItemError, Lease, RequestState
from respools.server.auth import require_owner, require_writer
from respools.server.batched_reads import BatchedReads
from respools.server.codec import lease_of
from respools.server.db.database import Database, Tx, utcnow
from respools.server.db.group_commit import GroupCommit
from respools.server.db.statements import LEASES_BY_IDS
from respools.server.db.tables import LEASES
from respools.server.definitions import DefinitionsCache
from respools.server.errors import ApiError, not_found
from respools.server.ops.leases import heartbeat
from respools.server.schemas import Principal

log = logging.getLogger(__name__)

FLUSH_S = 1.0
"""How long a renewal may wait in memory before it is written."""
SYNC_MARGIN_S = 10.0
"""A heartbeat whose lease's stored expiry is nearer than this is written before it is answered."""
MIN_TTL_S = 30.0
"""Pools with a shorter TTL have every heartbeat written before it is answered."""
DEFAULT_TTL_S = 60.0

_EXPIRES_AT = sa.bindparam("v_expires_at", type_=LEASES.c.expires_at.type)
_RENEW = (
    sa.update(LEASES)
    .where(
        LEASES.c.id.in_(sa.bindparam("k_ids", expanding=True)),
        LEASES.c.state.in_([RequestState.ACTIVE.value, RequestState.PREEMPTING.value]),
        LEASES.c.expires_at < _EXPIRES_AT,
    )
    .values(expires_at=_EXPIRES_AT)
)
"""Moves expiries forward, never back, and only of leases still held (one that ended meanwhile stays
ended)."""


class Renewals:
    """The renewals of one server process waiting for their flush (see the module's docstring)."""

    def __init__(self, db: Database, writes: GroupCommit, definitions: DefinitionsCache) -> None:
        self._db = db
        self._writes = writes
        self._definitions = definitions
        self._window = utcnow()
        self._pending: defaultdict[datetime, set[str]] = defaultdict(set)
        self.flushed = 0
        """Renewals written so far (for tests and metrics)."""
        self._leases = BatchedReads(db, _leases_by_ids)
        """Heartbeats read their lease together (see :mod:`respools.server.batched_reads`)."""

    async def renew(self, principal: Principal, lease_id: str) -> Lease | None:
        """The lease as renewed, its renewal held for the next flush; ``None`` when this heartbeat must
        be written before it is answered (the caller takes the synchronous path, which also gives the
        errors: unknown lease, another subject's, a lease that ended)."""
        require_writer(principal)
        lease = await self._leases.get(lease_id)
        if lease is None:
            raise not_found("lease", lease_id, "lease_id")
        require_owner(principal, lease.subject, f"lease {lease_id}")
        return self._held_back(lease)

    async def renew_many(self, principal: Principal, lease_ids: list[str]) -> HeartbeatOutcomes:
        """Heartbeat each of ``lease_ids`` (a holder of many leases' batch): one read for all of them,
        renewals held back as :meth:`renew` does, the rest written together (group commit joins them).
        Each refused lease is reported with the status its own heartbeat would answer."""
        require_writer(principal)
        ids = list(dict.fromkeys(lease_ids))
        rows = await run_in_threadpool(
            self._db.read,
            lambda conn: {r.id: lease_of(r._mapping) for r in conn.execute(LEASES_BY_IDS, {"k_ids": ids})},
        )
        renewed: dict[str, Lease] = {}
        errors: list[ItemError] = []
        written: list[str] = []
        for lease_id in ids:
            lease = rows.get(lease_id)
            try:
                if lease is None:
                    raise not_found("lease", lease_id, "lease_ids")
                require_owner(principal, lease.subject, f"lease {lease_id}")
            except ApiError as exc:
                errors.append(ItemError(id=lease_id, status=exc.status, detail=exc.detail))
                continue
            held = self._held_back(lease)
            if held is None:
                written.append(lease_id)
            else:
                renewed[lease_id] = held
        outcomes = await asyncio.gather(
            *(heartbeat(self._writes, self._definitions, principal, i) for i in written), return_exceptions=True
        )
        for lease_id, outcome in zip(written, outcomes, strict=True):
            if isinstance(outcome, ApiError):
                errors.append(ItemError(id=lease_id, status=outcome.status, detail=outcome.detail))
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                renewed[lease_id] = outcome
        return HeartbeatOutcomes(leases=[renewed[i] for i in ids if i in renewed], errors=errors)

    def _held_back(self, lease: Lease) -> Lease | None:
        """``lease`` renewed with its write held for the flush, or ``None`` when it must be written now."""
        if lease.state not in (RequestState.ACTIVE, RequestState.PREEMPTING) or lease.expires_at is None:
            return None
        pool = self._definitions.get().pool(lease.pool)
        ttl = pool.lease_ttl_s if pool is not None else DEFAULT_TTL_S
        if ttl < MIN_TTL_S or lease.expires_at - utcnow() < timedelta(seconds=SYNC_MARGIN_S):
            return None
        expires_at = self._window + timedelta(seconds=ttl)
        if expires_at <= lease.expires_at:
            return lease  # the stored expiry is already as late: nothing to write
        self._pending[expires_at].add(lease.id)
        return lease.model_copy(update={"expires_at": expires_at})

    async def flush(self) -> int:
        """Write the renewals held so far; returns how many."""
        pending, self._pending, self._window = self._pending, defaultdict(set), utcnow()
        if not pending:
            return 0

        def work(tx: Tx) -> int:
            for expires_at, ids in pending.items():
                tx.conn.execute(_RENEW, {"k_ids": sorted(ids), "v_expires_at": expires_at})
            return sum(len(ids) for ids in pending.values())

        written = await self._writes.write(work, durable=False)
        self.flushed += written
        return written

    async def run(self, interval: float = FLUSH_S) -> None:
        """Until cancelled: flush every ``interval``; a last flush when cancelled (the server stopping)."""
        try:
            while True:
                await asyncio.sleep(interval)
                try:
                    await self.flush()
                except Exception:  # the renewals are lost; their holders' next heartbeats cover them
                    log.exception("could not write the held renewals")
        except asyncio.CancelledError:
            await self.flush()
            raise


def _leases_by_ids(conn: sa.Connection, ids: list[str]) -> dict[str, Lease]:
    return {row.id: lease_of(row._mapping) for row in conn.execute(LEASES_BY_IDS, {"k_ids": ids})}
