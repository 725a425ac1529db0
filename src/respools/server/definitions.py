"""What platform teams define — pools, the hosts agents report, policies, reservations — read as one
versioned whole and cached per process.

Every change to a definition bumps the ``config`` counter in the same transaction, so a reader knows
whether its copy is current by reading one row; the reconciler does this inside its snapshot
transaction, API processes when the change bus tells them (or after ``max_age_s`` in case a
notification was lost).

Host reports are the exception: agents renew them every few seconds, and a renewal must not make every
replica reload everything. A renewal changes only a report's times, which readers fetch fresh
(:meth:`Definitions.with_fresh_hosts`, one small query); the counter moves only when a report's content
changes or a host is lost or comes back. The inventory a pool offers is computed for an instant
(:meth:`Definitions.effective_pools`), since reports expire with time rather than with a change.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from datetime import datetime

import sqlalchemy as sa

from respools.model import Host, Policy, Pool, PoolSpec, Reservation
from respools.server.changes import Changes
from respools.server.codec import policy_of, pool_of, reservation_of
from respools.server.db.database import Database, Tx
from respools.server.db.statements import COUNTER_VALUE
from respools.server.db.tables import COUNTERS, HOSTS, POLICIES, POOLS, RESERVATIONS

CONFIG_COUNTER = "config"
DEFINITIONS_TOPIC = "definitions"


@dataclass(frozen=True, slots=True)
class HostReport:
    pool: str
    host: Host
    registered_at: datetime
    last_seen_at: datetime
    expires_at: datetime
    lost: bool

    def live_at(self, now: datetime) -> bool:
        return self.expires_at > now


@dataclass(slots=True)
class Definitions:
    version: int
    pools: dict[str, Pool]
    hosts: dict[str, list[HostReport]]
    policies: list[Policy]
    reservations: list[Reservation]
    _effective: dict[str, tuple[tuple[str, ...], PoolSpec]] = field(default_factory=dict)

    def pool(self, name: str) -> Pool | None:
        return self.pools.get(name)

    def policies_of_pool(self, pool: str) -> list[Policy]:
        return [p for p in self.policies if p.pool == pool]

    def policies_of_subject(self, subject: str) -> list[Policy]:
        return [p for p in self.policies if p.subject == subject]

    def reservations_of_pool(self, pool: str) -> list[Reservation]:
        return [r for r in self.reservations if r.pool == pool]

    def effective_pool(self, name: str, now: datetime) -> PoolSpec:
        """The pool as the scheduler sees it at ``now``: its declared inventory with the hosts agents
        reported merged in (a report replaces a declared host of the same name); hosts whose report
        expired are left out. A pool that agents report to never falls back to its declared GPUs."""
        pool = self.pools[name]
        reports = self.hosts.get(name)
        if not reports:
            return pool
        live = tuple(sorted(r.host.name for r in reports if r.live_at(now)))
        cached = self._effective.get(name)
        if cached is not None and cached[0] == live:
            return cached[1]
        reported = {r.host.name: r.host for r in reports if r.live_at(now)}
        reported_names = {r.host.name for r in reports}
        declared = [h for h in pool.inventory or [] if h.name not in reported_names]
        effective = pool.model_copy(update={"inventory": declared + [reported[n] for n in live]})
        self._effective[name] = (live, effective)
        return effective

    def known_pool(self, name: str, spec: PoolSpec | None = None) -> PoolSpec:
        """The pool with every host ever reported to it, live or not: what definitions are checked
        against, so that a policy does not become invalid because an agent missed a heartbeat."""
        pool = spec if spec is not None else self.pools[name]
        reports = self.hosts.get(name)
        if not reports:
            return pool
        reported = {r.host.name: r.host for r in reports}
        declared = [h for h in pool.inventory or [] if h.name not in reported]
        return pool.model_copy(update={"inventory": declared + [reported[n] for n in sorted(reported)]})

    def effective_pools(self, now: datetime) -> list[PoolSpec]:
        return [self.effective_pool(name, now) for name in sorted(self.pools)]

    def active_reservations(self, now: datetime) -> list[Reservation]:
        return [r for r in self.reservations if r.end > now]

    def with_fresh_hosts(self, conn: sa.Connection) -> Definitions:
        """These definitions with every host report's times and lost flag re-read from the store."""
        if not self.hosts:
            return self
        times = {
            (row.pool, row.name): row
            for row in conn.execute(
                sa.select(HOSTS.c.pool, HOSTS.c.name, HOSTS.c.last_seen_at, HOSTS.c.expires_at, HOSTS.c.lost)
            )
        }
        hosts: dict[str, list[HostReport]] = {}
        for pool, reports in self.hosts.items():
            for report in reports:
                row = times.get((pool, report.host.name))
                if row is None:  # forgotten since; the version check will reload soon
                    continue
                hosts.setdefault(pool, []).append(
                    replace(report, last_seen_at=row.last_seen_at, expires_at=row.expires_at, lost=row.lost)
                )
        return Definitions(self.version, self.pools, hosts, self.policies, self.reservations, self._effective)


def bump_config(tx: Tx) -> None:
    """Mark definitions as changed (call in every transaction that changes one)."""
    updated = tx.conn.execute(
        sa.update(COUNTERS).where(COUNTERS.c.name == CONFIG_COUNTER).values(value=COUNTERS.c.value + 1)
    )
    if updated.rowcount == 0:
        tx.conn.execute(sa.insert(COUNTERS).values(name=CONFIG_COUNTER, value=1))
    tx.changes.config.add(DEFINITIONS_TOPIC)
    tx.changes.wake = True


def config_version(conn: sa.Connection) -> int:
    value = conn.execute(COUNTER_VALUE, {"k_name": CONFIG_COUNTER}).scalar()
    return int(value or 0)


def load(conn: sa.Connection, version: int | None = None) -> Definitions:
    return Definitions(
        version=config_version(conn) if version is None else version,
        pools={row["name"]: pool_of(row) for row in conn.execute(sa.select(POOLS)).mappings()},
        hosts=_hosts(conn.execute(sa.select(HOSTS).order_by(HOSTS.c.pool, HOSTS.c.name)).mappings()),
        policies=[policy_of(row) for row in conn.execute(sa.select(POLICIES)).mappings()],
        reservations=[
            reservation_of(row) for row in conn.execute(sa.select(RESERVATIONS).order_by(RESERVATIONS.c.id)).mappings()
        ],
    )


def _hosts(rows: sa.engine.MappingResult) -> dict[str, list[HostReport]]:
    hosts: dict[str, list[HostReport]] = {}
    for row in rows:
        hosts.setdefault(row["pool"], []).append(
            HostReport(
                pool=row["pool"],
                host=Host.model_validate(row["host"]),
                registered_at=row["registered_at"],
                last_seen_at=row["last_seen_at"],
                expires_at=row["expires_at"],
                lost=row["lost"],
            )
        )
    return hosts


class DefinitionsCache:
    """One process's copy of the definitions."""

    def __init__(self, db: Database, max_age_s: float = 5.0) -> None:
        self._db = db
        self._max_age_s = max_age_s
        self._current: Definitions | None = None
        self._checked_at = 0.0
        self._stale = True
        self._lock = threading.Lock()

    def on_changes(self, changes: Changes) -> None:
        if DEFINITIONS_TOPIC in changes.config or changes.resync:
            self._stale = True

    def within(self, conn: sa.Connection) -> Definitions:
        """The definitions as of ``conn``'s transaction (reloaded only if the version moved)."""
        version = config_version(conn)
        with self._lock:
            current = self._current
        if current is not None and current.version == version:
            return current
        loaded = load(conn, version)
        with self._lock:
            if self._current is None or self._current.version <= version:
                self._current = loaded
        return loaded

    def get(self) -> Definitions:
        """The latest definitions this process knows of, checked against the store when stale."""
        now = time.monotonic()
        if self._current is not None and not self._stale and now - self._checked_at < self._max_age_s:
            return self._current
        self._stale = False
        self._checked_at = now
        return self._db.read(self.within)
