"""What a lease leaves on the ZenML step run: which lease, where, how much was borrowed, and every
preemption of the step's request so far (so a retried step's page tells its whole story)."""

from __future__ import annotations

import logging
from typing import Any

from respools import ApiError, LeaseSession, ServerUnreachable
from respools.model import EventKind, Lease, dump_resources

log = logging.getLogger(__name__)

METADATA_KEY = "respools"


def lease_metadata(session: LeaseSession) -> dict[str, Any]:
    """The step run metadata for the lease ``session`` holds (or held last)."""
    lease = session.lease
    record: dict[str, Any] = {
        "lease_id": lease.id,
        "request_id": lease.request_id,
        "pool": lease.pool,
        "subject": lease.subject,
        "stack": lease.stack,
        "attempt": lease.attempt,
        "preemptible": lease.preemptible,
        "priority": lease.priority,
        "resources": dump_resources(lease.resources),
        "borrowed": dump_resources(lease.borrowed),
        "placement": [item.model_dump(mode="json", exclude_none=True) for item in lease.placement.items],
        "granted_at": lease.granted_at.isoformat(),
        "preempted": _notice(lease) if lease.preempt_deadline is not None else None,
        "preemptions": _preemptions(session, lease),
        "dashboard_url": f"{session.client.config.urls[0].rstrip('/')}/#lease-{lease.id}",
    }
    if session.realization is not None and session.realization.notes:
        record["notes"] = list(session.realization.notes)
    return record


def _notice(lease: Lease) -> dict[str, Any]:
    return {
        "reason": lease.preempt_reason.value if lease.preempt_reason else None,
        "deadline": lease.preempt_deadline.isoformat() if lease.preempt_deadline else None,
        "preempted_for": lease.preempted_for,
    }


def _preemptions(session: LeaseSession, lease: Lease) -> list[dict[str, Any]]:
    """Every preemption notice the request got, from the server's event log (earlier attempts included)."""
    try:
        events = session.client.events(request_id=lease.request_id, kinds=[EventKind.PREEMPTING], limit=100)
    except (ApiError, ServerUnreachable) as exc:
        log.warning("respools: cannot read the preemptions of request %s: %s", lease.request_id, exc)
        return []
    return [
        {"at": event.at.isoformat(), "lease_id": event.lease_id, "message": event.message, **_reason(event.data)}
        for event in events
    ]


def _reason(data: dict[str, Any]) -> dict[str, Any]:
    return {key: data[key] for key in ("reason", "deadline", "for_request") if key in data}
