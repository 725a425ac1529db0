"""Leases: read, heartbeat, release, and an admin's preemption."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from respools.model import EventKind, Lease, PreemptReason, RequestState
from respools.server.auth import require_owner, require_writer, visible_subject
from respools.server.codec import lease_of
from respools.server.db.database import Database, Tx
from respools.server.db.group_commit import GroupCommit
from respools.server.db.joined import ALONE, Alone, Joinable, Kind
from respools.server.db.statements import (
    LEASE_BY_ID,
    LEASE_BY_ID_LOCKED,
    LEASES_BY_IDS_LOCKED,
    REQUEST_BY_ID_LOCKED,
)
from respools.server.db.tables import LEASES
from respools.server.definitions import DefinitionsCache
from respools.server.errors import conflict, invalid, not_found
from respools.server.events import append, event_row
from respools.server.lifecycle import (
    LIVE,
    complete_preemption,
    release,
    update_lease,
    update_leases,
    update_request,
    update_requests,
)
from respools.server.schemas import OveruseReport, PreemptSpec, Principal, StopConfirmation

DEFAULT_TTL_S = 60.0
MAX_CHECKPOINTS = 2**31 - 1
"""The count stops here (the column is a 32-bit integer)."""


def _locked_lease(tx: Tx, lease_id: str) -> Lease:
    row = tx.conn.execute(LEASE_BY_ID_LOCKED, {"k_id": lease_id}).mappings().first()
    if row is None:
        raise not_found("lease", lease_id, "lease_id")
    return lease_of(row)


def get_lease(db: Database, principal: Principal, lease_id: str) -> Lease:
    row = db.read(lambda conn: conn.execute(LEASE_BY_ID, {"k_id": lease_id}).mappings().first())
    if row is None:
        raise not_found("lease", lease_id, "lease_id")
    lease = lease_of(row)
    require_owner(principal, lease.subject, f"lease {lease_id}")
    return lease


def list_leases(
    db: Database,
    *,
    subject: str | None = None,
    pool: str | None = None,
    states: list[RequestState] | None = None,
    limit: int = 100,
) -> list[Lease]:
    query = sa.select(LEASES).order_by(LEASES.c.granted_at.desc(), LEASES.c.id).limit(limit)
    if subject is not None:
        query = query.where(LEASES.c.subject == subject)
    if pool is not None:
        query = query.where(LEASES.c.pool == pool)
    if states:
        query = query.where(LEASES.c.state.in_([s.value for s in states]))
    return [lease_of(row) for row in db.read(lambda conn: list(conn.execute(query).mappings()))]


@dataclass(frozen=True, slots=True)
class LeaseCall:
    """A holder's call on one of its leases."""

    principal: Principal
    lease_id: str


def _owns(principal: Principal, lease: sa.RowMapping) -> bool:
    subject = visible_subject(principal)
    return subject is None or subject == lease["subject"]


def _locked_leases(tx: Tx, calls: Sequence[LeaseCall]) -> list[tuple[LeaseCall, Lease | None]]:
    """Lock the leases of ``calls`` (in id order, as every batch does, so two batches cannot deadlock
    on them) and pair each call with its lease — ``None`` where the call must run alone: no such lease,
    another subject's, or a second call on the same lease."""
    ids = sorted({call.lease_id for call in calls})
    rows = {row["id"]: row for row in tx.conn.execute(LEASES_BY_IDS_LOCKED, {"k_ids": ids}).mappings()}
    paired: list[tuple[LeaseCall, Lease | None]] = []
    seen: set[str] = set()
    for call in calls:
        row = rows.get(call.lease_id)
        ok = row is not None and call.lease_id not in seen and _owns(call.principal, row)
        seen.add(call.lease_id)
        paired.append((call, lease_of(row) if ok and row is not None else None))
    return paired


def _renewal(tx: Tx, defs: DefinitionsCache, lease: Lease) -> Lease:
    """A live lease as a heartbeat leaves it: renewed for its pool's TTL, and started by the first."""
    pool = defs.get().pool(lease.pool)
    ttl = pool.lease_ttl_s if pool is not None else DEFAULT_TTL_S
    renewed: dict[str, Any] = {"expires_at": tx.now + timedelta(seconds=ttl)}
    if lease.state == RequestState.GRANTED:
        renewed |= {"state": RequestState.ACTIVE, "started_at": tx.now}
    return lease.model_copy(update=renewed)


def _record_renewals(tx: Tx, renewals: Sequence[tuple[Lease, Lease]]) -> None:
    """Write renewals (each lease before and after): one statement per new expiry (one per pool TTL)
    and whether it started, and one for the requests that started with their leases."""
    groups: defaultdict[tuple[datetime | None, bool], list[str]] = defaultdict(list)
    for before, after in renewals:
        groups[after.expires_at, before.state == RequestState.GRANTED].append(after.id)
    for (expires_at, starts), ids in groups.items():
        if starts:
            update_leases(tx, ids, expires_at=expires_at, state=RequestState.ACTIVE.value, started_at=tx.now)
        else:
            update_leases(tx, ids, expires_at=expires_at)
    started = [before.request_id for before, _ in renewals if before.state == RequestState.GRANTED]
    update_requests(tx, started, state=RequestState.ACTIVE.value)


@dataclass(frozen=True, slots=True)
class Heartbeats(Kind[LeaseCall, Lease]):
    """Renews every caller's live lease together; anything else runs alone, where its error is."""

    defs: DefinitionsCache

    def together(self, tx: Tx, items: Sequence[LeaseCall]) -> list[Lease | Alone]:
        renewals = [
            None if lease is None or lease.state.value not in LIVE else (lease, _renewal(tx, self.defs, lease))
            for _, lease in _locked_leases(tx, items)
        ]
        _record_renewals(tx, [renewal for renewal in renewals if renewal is not None])
        return [ALONE if renewal is None else renewal[1] for renewal in renewals]


async def heartbeat(writes: GroupCommit, defs: DefinitionsCache, principal: Principal, lease_id: str) -> Lease:
    """Renew a lease for the pool's TTL; the first heartbeat marks it active. The answer carries the
    state, so a holder learns of preemption (and its deadline) here."""
    require_writer(principal)
    return await writes.write(heartbeat_work(defs, principal, lease_id), durable=False)


def heartbeat_work(defs: DefinitionsCache, principal: Principal, lease_id: str) -> Joinable[LeaseCall, Lease]:
    """A heartbeat's work in a write transaction, alone or with others (see :func:`heartbeat`)."""

    def alone(tx: Tx) -> Lease:
        lease = _locked_lease(tx, lease_id)
        require_owner(principal, lease.subject, f"lease {lease_id}")
        if lease.state.value not in LIVE:
            raise conflict(
                f"lease {lease_id} is {lease.state.value}; it can no longer be renewed: submit a new request",
                "lease_id",
            )
        renewed = _renewal(tx, defs, lease)
        _record_renewals(tx, [(lease, renewed)])
        return renewed

    return Joinable(Heartbeats(defs), LeaseCall(principal, lease_id), alone)


@dataclass(frozen=True, slots=True)
class Releases(Kind[LeaseCall, Lease]):
    """Releases every caller's granted or active lease together; the rest (a preempting lease, one that
    ended, errors) runs alone."""

    def together(self, tx: Tx, items: Sequence[LeaseCall]) -> list[Lease | Alone]:
        ending = {RequestState.GRANTED, RequestState.ACTIVE}
        leases = [
            lease if lease is not None and lease.state in ending else None for _, lease in _locked_leases(tx, items)
        ]
        append(tx, release(tx, [lease for lease in leases if lease is not None], "released by its holder"))
        update = {"state": RequestState.RELEASED, "released_at": tx.now}
        return [ALONE if lease is None else lease.model_copy(update=update) for lease in leases]


async def release_lease(writes: GroupCommit, principal: Principal, lease_id: str) -> Lease:
    """Give a lease back. Releasing a preempting lease completes its preemption (and requeues its request
    when retries remain). Releasing a lease that has ended already changes nothing."""
    require_writer(principal)
    return await writes.write(release_work(principal, lease_id), durable=False)


def release_work(principal: Principal, lease_id: str) -> Joinable[LeaseCall, Lease]:
    """A release's work in a write transaction, alone or with others (see :func:`release_lease`)."""

    def alone(tx: Tx) -> Lease:
        lease = _locked_lease(tx, lease_id)
        require_owner(principal, lease.subject, f"lease {lease_id}")
        if lease.state.value not in LIVE:
            return lease
        if lease.state == RequestState.PREEMPTING:
            # Requeuing needs the request's attempt and spec (locked after the lease, as cancel does).
            request = tx.conn.execute(REQUEST_BY_ID_LOCKED, {"k_id": lease.request_id}).mappings().one()
            events = complete_preemption(tx, lease, request, "released by its holder")
            ended = RequestState.PREEMPTED
        else:
            events = release(tx, [lease], "released by its holder")
            ended = RequestState.RELEASED
        append(tx, events)
        # The lease row now differs from the one read above only by what was just written: answer
        # from that rather than reading it again.
        return lease.model_copy(update={"state": ended, "released_at": tx.now})

    return Joinable(Releases(), LeaseCall(principal, lease_id), alone)


def _give_notice(
    tx: Tx, defs: DefinitionsCache, lease: Lease, reason: PreemptReason, message: str, grace_s: float | None
) -> Lease:
    """Put a live lease under preemption notice outside the scheduler (an admin's or a watchdog's call)."""
    pool = defs.get().pool(lease.pool)
    grace = grace_s if grace_s is not None else (pool.preemption_grace_s if pool else 60.0)
    deadline = tx.now + timedelta(seconds=grace)
    update_lease(
        tx, lease.id, state=RequestState.PREEMPTING.value, preempt_reason=reason.value, preempt_deadline=deadline
    )
    update_request(tx, lease.request_id, state=RequestState.PREEMPTING.value, reason=message)
    notice = event_row(
        tx.now,
        EventKind.PREEMPTING,
        f"lease {lease.id} preempting: {message}",
        pool=lease.pool,
        subject=lease.subject,
        request_id=lease.request_id,
        lease_id=lease.id,
        data={"reason": reason.value, "deadline": deadline.isoformat()},
    )
    append(tx, [notice])
    tx.changes.wake = True
    return lease.model_copy(
        update={"state": RequestState.PREEMPTING, "preempt_reason": reason, "preempt_deadline": deadline}
    )


def checkpoint_lease(db: Database, principal: Principal, lease_id: str) -> Lease:
    """Record that the holder took a checkpoint now (server time, not the client's): a preemption then
    loses only the work since. Bounded by design: a lease keeps one timestamp and a count, and no event
    is logged per call, so a chatty client grows nothing. 409 once the lease has ended."""
    require_writer(principal)

    def work(tx: Tx) -> Lease:
        lease = _locked_lease(tx, lease_id)
        require_owner(principal, lease.subject, f"lease {lease_id}")
        if lease.state.value not in LIVE:
            raise conflict(
                f"lease {lease_id} is {lease.state.value}: a checkpoint can only be reported on a live lease",
                "lease_id",
            )
        count = min(lease.checkpoints + 1, MAX_CHECKPOINTS)
        update_lease(tx, lease_id, checkpointed_at=tx.now, checkpoints=count)
        return lease.model_copy(update={"checkpointed_at": tx.now, "checkpoints": count})

    return db.write(work)


def preempt_lease(db: Database, defs: DefinitionsCache, lease_id: str, spec: PreemptSpec) -> Lease:
    """An admin's preemption: the lease gets notice and a grace deadline like any victim. A lease that is
    already preempting keeps its earlier deadline."""

    def work(tx: Tx) -> Lease:
        lease = _locked_lease(tx, lease_id)
        if lease.state == RequestState.PREEMPTING:
            return lease
        if lease.state.value not in LIVE:
            raise conflict(f"lease {lease_id} is {lease.state.value}: there is nothing to preempt", "lease_id")
        message = spec.message or "preempted by an administrator"
        return _give_notice(tx, defs, lease, PreemptReason.ADMIN, message, spec.grace_s)

    return db.write(work)


def report_overuse(db: Database, defs: DefinitionsCache, lease_id: str, report: OveruseReport) -> Lease:
    """Log an agent's over-use report and, when it asks, preempt the lease (reason ``overuse``)."""
    if report.lease_id != lease_id:
        raise invalid(f"the body names lease {report.lease_id!r} but the path says {lease_id!r}", "lease_id")

    def work(tx: Tx) -> Lease:
        lease = _locked_lease(tx, lease_id)
        logged = event_row(
            tx.now,
            EventKind.OVERUSE,
            report.message,
            pool=lease.pool,
            subject=lease.subject,
            request_id=lease.request_id,
            lease_id=lease_id,
            data=report.model_dump(mode="json", exclude={"message", "lease_id"}),
        )
        append(tx, [logged])
        if report.preempt and lease.state in {RequestState.GRANTED, RequestState.ACTIVE}:
            return _give_notice(tx, defs, lease, PreemptReason.OVERUSE, report.message, None)
        return lease

    return db.write(work)


def confirm_stop(db: Database, lease_id: str, confirmation: StopConfirmation) -> Lease:
    """A backend confirms that a preempting lease's workload has stopped: the lease ends as its holder's
    release would (requeued while retries remain) and its capacity is handed over (DESIGN §2.8). A lease
    that ended already is answered as it is; a granted or active lease is refused, since nothing asked
    for its workload to stop."""

    def work(tx: Tx) -> Lease:
        lease = _locked_lease(tx, lease_id)
        if lease.state.value not in LIVE:
            return lease
        if lease.state != RequestState.PREEMPTING:
            raise conflict(
                f"lease {lease_id} is {lease.state.value}: a stop is confirmed only for a preempting lease; "
                "a holder that finished releases its lease instead",
                "lease_id",
            )
        where = f" on {confirmation.host}" if confirmation.host else ""
        how = f"its workload was stopped, confirmed by backend {confirmation.backend}{where}: {confirmation.evidence}"
        request = tx.conn.execute(REQUEST_BY_ID_LOCKED, {"k_id": lease.request_id}).mappings().one()
        append(tx, complete_preemption(tx, lease, request, how))
        return lease.model_copy(update={"state": RequestState.PREEMPTED, "released_at": tx.now})

    return db.write(work)
