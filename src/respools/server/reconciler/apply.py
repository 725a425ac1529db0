"""Writing one cycle's decisions. Everything here runs inside the cycle's transaction; updates of the
same shape go out as one ``executemany`` (pipelined by psycopg), so a cycle that grants fifty requests
costs a handful of round trips, not a hundred."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from respools.model import EventKind, Lease, PoolSpec, PreemptReason, RequestState, dump_resources, format_resources
from respools.scheduling import Decisions, Grant
from respools.server.changes import Granted
from respools.server.codec import WAIT_CLEARED, placement_document
from respools.server.db.database import Tx
from respools.server.db.statements import INSERT_LEASE
from respools.server.db.tables import LEASES, REQUESTS
from respools.server.events import event_row
from respools.server.lifecycle import bulk_update, complete_preemption, expire
from respools.server.reconciler.snapshot import CycleInput


@dataclass(slots=True)
class CycleOutcome:
    """What a committed cycle did, for metrics, logs and the backends."""

    grants: list[tuple[Grant, float]] = field(default_factory=list)
    """Each grant with the seconds its request waited in the queue."""
    rejected: int = 0
    preempted: list[tuple[str, PreemptReason]] = field(default_factory=list)
    expired: int = 0
    revoked: list[tuple[Lease, PoolSpec | None]] = field(default_factory=list)
    """Overdue leases whose holder was also silent for a full TTL: ended, their capacity handed over."""
    overdue: list[tuple[Lease, PoolSpec | None]] = field(default_factory=list)
    """Leases that passed their grace deadline unreleased this cycle: their backends must stop them."""
    waiting: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def decided(self) -> bool:
        """Whether the cycle granted, rejected, preempted, expired, revoked or marked anything overdue."""
        return bool(self.grants or self.rejected or self.preempted or self.expired or self.revoked or self.overdue)


def new_lease_id() -> str:
    return "lse_" + uuid.uuid4().hex


def apply_decisions(tx: Tx, cycle: CycleInput, decisions: Decisions) -> CycleOutcome:
    outcome = CycleOutcome()
    _end_leases(tx, cycle, decisions, outcome)
    _mark_overdue(tx, cycle, decisions, outcome)
    _grant(tx, cycle, decisions, outcome)
    _reject(tx, cycle, decisions, outcome)
    _preempt(tx, cycle, decisions, outcome)
    _record_waits(tx, cycle, decisions, outcome)
    return outcome


def _end_leases(tx: Tx, cycle: CycleInput, decisions: Decisions, outcome: CycleOutcome) -> None:
    if not decisions.expiries and not decisions.revocations:
        return
    leases = {lease.id: lease for lease in cycle.snapshot.leases}
    ending = [leases[e.lease_id] for e in decisions.expiries] + [leases[r.lease_id] for r in decisions.revocations]
    request_rows = {
        row["id"]: row
        for row in tx.conn.execute(
            sa.select(REQUESTS.c.id, REQUESTS.c.attempt, REQUESTS.c.spec).where(
                REQUESTS.c.id.in_([lease.request_id for lease in ending])
            )
        ).mappings()
    }
    for expiry in decisions.expiries:
        outcome.events += expire(tx, leases[expiry.lease_id], expiry.reason)
        outcome.expired += 1
    for revocation in decisions.revocations:
        lease = leases[revocation.lease_id]
        outcome.events += complete_preemption(
            tx,
            lease,
            request_rows[lease.request_id],
            "it was overdue and its holder was silent for a full lease TTL, so its workload is taken for gone",
        )
        outcome.revoked.append((lease, cycle.definitions.pools.get(lease.pool)))


def _mark_overdue(tx: Tx, cycle: CycleInput, decisions: Decisions, outcome: CycleOutcome) -> None:
    """A preempting lease past its deadline keeps its capacity and is marked overdue once; the loop then
    asks its backend to stop the workload (DESIGN §2.8)."""
    if not decisions.overdue:
        return
    leases = {lease.id: lease for lease in cycle.snapshot.leases}
    rows = []
    for decision in decisions.overdue:
        lease = leases[decision.lease_id]
        rows.append({"id": lease.id, "overdue_since": tx.now})
        deadline = lease.preempt_deadline.isoformat(timespec="seconds") if lease.preempt_deadline else "?"
        outcome.events.append(
            event_row(
                tx.now,
                EventKind.OVERDUE,
                f"lease {lease.id} is overdue: its grace deadline {deadline} passed before it was released; it "
                "keeps its capacity until its holder releases it, its backend confirms the workload stopped, "
                "or its holder is silent for a full lease TTL",
                pool=lease.pool,
                subject=lease.subject,
                request_id=lease.request_id,
                lease_id=lease.id,
                data={"deadline": deadline, "preempted_for": lease.preempted_for},
            )
        )
        outcome.overdue.append(
            (lease.model_copy(update={"overdue_since": tx.now}), cycle.definitions.pools.get(lease.pool))
        )
    bulk_update(tx, LEASES, rows)


def _grant(tx: Tx, cycle: CycleInput, decisions: Decisions, outcome: CycleOutcome) -> None:
    if not decisions.grants:
        return
    requests = {r.id: r for r in cycle.snapshot.requests}
    now = tx.now
    lease_rows: list[dict[str, Any]] = []
    request_rows: list[dict[str, Any]] = []
    for seq, grant in enumerate(decisions.grants):  # in the order the cycle made them
        request = requests[grant.request_id]
        pool = cycle.pools[grant.pool]
        lease_id = new_lease_id()
        lease_rows.append(
            {
                "id": lease_id,
                "request_id": request.id,
                "subject": request.subject,
                "pool": pool.name,
                "stack": pool.stack,
                "state": RequestState.GRANTED.value,
                "resources": grant.resources,
                "borrowed": grant.borrowed,
                "placement": placement_document(grant.placement),
                "preemptible": request.preemptible,
                "priority": request.priority,
                "attempt": request.attempt,
                "labels": request.labels,
                "granted_at": now,
                "grant_seq": seq,
                "started_at": None,
                "expires_at": now + timedelta(seconds=pool.init_timeout_s),
                "max_runtime_s": request.max_runtime_s,
                "preempt_reason": None,
                "preempt_deadline": None,
                "preempted_for": None,
                "overdue_since": None,
                "released_at": None,
                "checkpointed_at": None,
                "checkpoints": 0,
            }
        )
        request_rows.append(
            {
                "id": request.id,
                "state": RequestState.GRANTED.value,
                "lease_id": lease_id,
                "reason": None,
                "wait_pool": None,
                **WAIT_CLEARED,
                "updated_at": now,
            }
        )
        borrowed = f" ({format_resources(grant.borrowed)} borrowed)" if grant.borrowed else ""
        outcome.events.append(
            event_row(
                now,
                EventKind.GRANTED,
                f"request {request.id} granted on pool {pool.name}: {format_resources(grant.resources)}{borrowed}",
                pool=pool.name,
                subject=request.subject,
                request_id=request.id,
                lease_id=lease_id,
                data={
                    "resources": dump_resources(grant.resources),
                    "borrowed": dump_resources(grant.borrowed),
                    "hosts": grant.placement.hosts,
                    "attempt": request.attempt,
                },
            )
        )
        outcome.grants.append((grant, (now - cycle.queued_at[request.id]).total_seconds()))
        tx.changes.requests.add(request.id)
        tx.changes.granted[request.id] = Granted(lease_id, request.attempt)
    tx.conn.execute(INSERT_LEASE, lease_rows)
    bulk_update(tx, REQUESTS, request_rows)


def _reject(tx: Tx, cycle: CycleInput, decisions: Decisions, outcome: CycleOutcome) -> None:
    if not decisions.rejects:
        return
    subjects = {r.id: r.subject for r in cycle.snapshot.requests}
    rows = []
    for reject in decisions.rejects:
        rows.append(
            {
                "id": reject.request_id,
                "state": RequestState.REJECTED.value,
                "reason": reject.reason,
                "wait_pool": None,
                **WAIT_CLEARED,
                "updated_at": tx.now,
            }
        )
        outcome.events.append(
            event_row(
                tx.now,
                EventKind.REJECTED,
                f"request {reject.request_id} rejected: {reject.reason}",
                subject=subjects.get(reject.request_id),
                request_id=reject.request_id,
            )
        )
        tx.changes.requests.add(reject.request_id)
    bulk_update(tx, REQUESTS, rows)
    outcome.rejected = len(rows)


def _preempt(tx: Tx, cycle: CycleInput, decisions: Decisions, outcome: CycleOutcome) -> None:
    if not decisions.preemptions:
        return
    leases = {lease.id: lease for lease in cycle.snapshot.leases}
    lease_rows: list[dict[str, Any]] = []
    victim_rows: list[dict[str, Any]] = []
    for preempt in decisions.preemptions:
        pool = cycle.pools[preempt.pool]
        deadline = tx.now + timedelta(seconds=pool.preemption_grace_s)
        for lease_id in preempt.lease_ids:
            lease = leases[lease_id]
            if lease.state == RequestState.PREEMPTING:
                continue
            lease_rows.append(
                {
                    "id": lease_id,
                    "state": RequestState.PREEMPTING.value,
                    "preempt_reason": preempt.reason.value,
                    "preempt_deadline": deadline,
                    "preempted_for": preempt.request_id,
                }
            )
            victim_rows.append(
                {
                    "id": lease.request_id,
                    "state": RequestState.PREEMPTING.value,
                    "reason": preempt.message,
                    "updated_at": tx.now,
                }
            )
            outcome.events.append(
                event_row(
                    tx.now,
                    EventKind.PREEMPTING,
                    f"lease {lease_id} preempting: {preempt.message}",
                    pool=pool.name,
                    subject=lease.subject,
                    request_id=lease.request_id,
                    lease_id=lease_id,
                    data={
                        "reason": preempt.reason.value,
                        "deadline": deadline.isoformat(),
                        "for_request": preempt.request_id,
                    },
                )
            )
            outcome.preempted.append((pool.name, preempt.reason))
            tx.changes.requests.add(lease.request_id)
    bulk_update(tx, LEASES, lease_rows)
    bulk_update(tx, REQUESTS, victim_rows)
    nominated = {r.id: r.nominated_pool for r in cycle.snapshot.requests}
    bulk_update(
        tx,
        REQUESTS,
        [
            {"id": p.request_id, "nominated_pool": p.pool, "updated_at": tx.now}
            for p in decisions.preemptions
            if nominated.get(p.request_id) != p.pool
        ],
    )


def _record_waits(tx: Tx, cycle: CycleInput, decisions: Decisions, outcome: CycleOutcome) -> None:
    """Store why each request waits and its position — only where that changed, since a long queue
    would otherwise rewrite every row on every cycle."""
    requests = {r.id: r for r in cycle.snapshot.requests}
    rows = []
    for run in decisions.wait_runs:
        reason, message, pool = run.reason, run.message, run.pool
        for position, request_id in enumerate(run.request_ids, run.first_position):
            request = requests.get(request_id)
            if request is None:
                continue
            if (
                request.wait_reason == reason
                and request.reason == message
                and request.queue_position == position
                and cycle.wait_pool.get(request_id) == pool
            ):
                continue
            rows.append(
                {
                    "id": request_id,
                    "wait_reason": reason.value,
                    "reason": message,
                    "queue_position": position,
                    "wait_pool": pool,
                }
            )
    bulk_update(tx, REQUESTS, rows)
    outcome.waiting = decisions.waiting
