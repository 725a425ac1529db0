"""One reconciliation cycle, inside one transaction: snapshot, decide, write, sequence events."""

from __future__ import annotations

import time
from dataclasses import dataclass

import sqlalchemy as sa

from respools.model import EventKind
from respools.scheduling import Memory, schedule
from respools.server.db.database import Tx
from respools.server.db.tables import HOSTS
from respools.server.definitions import Definitions, DefinitionsCache, bump_config
from respools.server.events import append, drain_outbox, event_row
from respools.server.reconciler.apply import CycleOutcome, apply_decisions
from respools.server.reconciler.live_leases import LiveLeases
from respools.server.reconciler.snapshot import load_snapshot


@dataclass(slots=True)
class CycleTimings:
    load_s: float = 0.0
    schedule_s: float = 0.0
    write_s: float = 0.0


def run_cycle(
    tx: Tx,
    cache: DefinitionsCache,
    timings: CycleTimings | None = None,
    memory: Memory | None = None,
    live: LiveLeases | None = None,
) -> CycleOutcome:
    """Decide and record everything due at ``tx.now``; the caller commits. ``memory`` and ``live`` are
    what the leader keeps from one cycle to the next (``schedule``'s memory, its copy of the live leases)."""
    t0 = time.perf_counter()
    definitions = cache.within(tx.conn).with_fresh_hosts(tx.conn)
    cycle = load_snapshot(tx.conn, definitions, tx.now, live)
    t1 = time.perf_counter()
    decisions = schedule(cycle.snapshot, memory)
    t2 = time.perf_counter()
    if tx.is_postgres:
        # Sequence what API transactions logged *before* this cycle's own events: the releases this
        # snapshot saw precede the grants they made room for, so the log replays as it happened.
        drain_outbox(tx)
    outcome = apply_decisions(tx, cycle, decisions)
    outcome.events += _lost_hosts(tx, definitions)
    append(tx, outcome.events, sequencer=True)
    if tx.is_postgres and not outcome.decided:
        # Only wait records and sequenced events: losing them in a database crash loses nothing (the
        # outbox rows come back with them), so spare the fsync. Decisions always commit durably.
        tx.conn.exec_driver_sql("SET LOCAL synchronous_commit TO OFF")
    if timings is not None:
        timings.load_s, timings.schedule_s, timings.write_s = t1 - t0, t2 - t1, time.perf_counter() - t2
    return outcome


def _lost_hosts(tx: Tx, definitions: Definitions) -> list[dict[str, object]]:
    """Mark hosts whose reports expired as lost, once, with an event; their leases are left alone."""
    events: list[dict[str, object]] = []
    for pool, reports in definitions.hosts.items():
        for report in reports:
            if report.lost or report.live_at(tx.now):
                continue
            marked = tx.conn.execute(
                sa.update(HOSTS)
                .where(HOSTS.c.pool == pool, HOSTS.c.name == report.host.name, HOSTS.c.lost.is_(False))
                .values(lost=True)
            )
            if marked.rowcount:
                events.append(
                    event_row(
                        tx.now,
                        EventKind.HOST_LOST,
                        f"host {report.host.name} left pool {pool}: no report since "
                        f"{report.last_seen_at.isoformat(timespec='seconds')}",
                        pool=pool,
                        data={"host": report.host.name, "last_seen_at": report.last_seen_at.isoformat()},
                    )
                )
    if events:
        bump_config(tx)
    return events
