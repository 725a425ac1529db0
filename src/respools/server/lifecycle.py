"""How a lease ends, shared by the API (release, cancel) and the reconciler (expiry, revocation).

A preempted lease's request goes back to ``pending`` with ``attempt + 1`` while retries remain; it keeps
its original ``submitted_at``, so it regains its old place in the queue (DESIGN §2.8). ``queued_at``
restarts, for the grant-latency metric.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from respools.model import EventKind, Lease, RequestState
from respools.server.codec import WAIT_CLEARED
from respools.server.db.database import Tx
from respools.server.db.statements import update_by_id, update_by_ids
from respools.server.events import event_row

LIVE = frozenset({RequestState.GRANTED.value, RequestState.ACTIVE.value, RequestState.PREEMPTING.value})


def update_request(tx: Tx, request_id: str, **values: Any) -> None:
    update_requests(tx, [request_id], **values)


def update_lease(tx: Tx, lease_id: str, **values: Any) -> None:
    update_leases(tx, [lease_id], **values)


def update_requests(tx: Tx, request_ids: Collection[str], **values: Any) -> None:
    """Set the same ``values`` on several requests, in one statement."""
    if not request_ids:
        return
    values["updated_at"] = tx.now
    statement = update_by_ids("requests", tuple(values))
    tx.conn.execute(statement, {"k_ids": list(request_ids), **{f"v_{k}": v for k, v in values.items()}})
    tx.changes.requests.update(request_ids)


def update_leases(tx: Tx, lease_ids: Collection[str], **values: Any) -> None:
    """Set the same ``values`` on several leases, in one statement."""
    if lease_ids:
        statement = update_by_ids("leases", tuple(values))
        tx.conn.execute(statement, {"k_ids": list(lease_ids), **{f"v_{k}": v for k, v in values.items()}})


def bulk_update(tx: Tx, table: sa.Table, rows: Sequence[dict[str, Any]]) -> None:
    """``UPDATE table SET … WHERE id = …`` for rows that all set the same columns (each has ``id``), as
    one ``executemany`` (pipelined by psycopg: one round trip)."""
    if not rows:
        return
    columns = tuple(c for c in rows[0] if c != "id")
    statement = update_by_id(table.name, columns)
    tx.conn.execute(statement, [{"k_id": r["id"], **{f"v_{c}": r[c] for c in columns}} for r in rows])


def _lease_event(tx: Tx, kind: EventKind, lease: Lease, message: str, **data: Any) -> dict[str, Any]:
    return event_row(
        tx.now,
        kind,
        message,
        pool=lease.pool,
        subject=lease.subject,
        request_id=lease.request_id,
        lease_id=lease.id,
        data=data,
    )


def complete_preemption(tx: Tx, lease: Lease, request: Mapping[Any, Any], how: str) -> list[dict[str, Any]]:
    """End a preempting lease (released by its holder, or revoked at its deadline) and requeue its
    request if it has retries left."""
    update_lease(tx, lease.id, state=RequestState.PREEMPTED.value, released_at=tx.now)
    events = [
        _lease_event(
            tx,
            EventKind.PREEMPTED,
            lease,
            f"lease {lease.id} preempted: {how}",
            reason=lease.preempt_reason.value if lease.preempt_reason else None,
        )
    ]
    attempt = int(request["attempt"])
    max_retries = int(request["spec"].get("max_retries", 0))
    if attempt < max_retries:
        update_request(
            tx,
            lease.request_id,
            state=RequestState.PENDING.value,
            attempt=attempt + 1,
            lease_id=None,
            queued_at=tx.now,
            reason=f"requeued after preemption (retry {attempt + 1} of {max_retries})",
            wait_pool=None,
            **WAIT_CLEARED,
        )
        events.append(
            event_row(
                tx.now,
                EventKind.REQUEUED,
                f"request {lease.request_id} requeued (retry {attempt + 1} of {max_retries})",
                pool=lease.pool,
                subject=lease.subject,
                request_id=lease.request_id,
                lease_id=lease.id,
                data={"attempt": attempt + 1},
            )
        )
    else:
        retries = "no retries were asked for" if max_retries == 0 else f"all {max_retries} retries are used"
        update_request(tx, lease.request_id, state=RequestState.PREEMPTED.value, reason=f"preempted ({how}); {retries}")
    tx.changes.wake = True
    return events


def release(tx: Tx, leases: Sequence[Lease], how: str) -> list[dict[str, Any]]:
    """End granted or active leases normally, all at once: their requests are done."""
    update_leases(tx, [lease.id for lease in leases], state=RequestState.RELEASED.value, released_at=tx.now)
    update_requests(tx, [lease.request_id for lease in leases], state=RequestState.RELEASED.value, reason=None)
    tx.changes.wake = True
    return [_lease_event(tx, EventKind.RELEASED, lease, f"lease {lease.id} released: {how}") for lease in leases]


def expire(tx: Tx, lease: Lease, why: str) -> list[dict[str, Any]]:
    """End a lease whose holder went silent (or never started): its capacity returns."""
    update_lease(tx, lease.id, state=RequestState.EXPIRED.value, released_at=tx.now)
    update_request(tx, lease.request_id, state=RequestState.EXPIRED.value, reason=f"lease expired: {why}")
    tx.changes.wake = True
    return [_lease_event(tx, EventKind.EXPIRED, lease, f"lease {lease.id} expired: {why}")]
