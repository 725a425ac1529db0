"""The service's own history as a trace: what each step asked for and how long its work ran.

Built from the event log alone (a submission's event carries its spec), so any replica answers the
same and nothing is sampled. What a trace needs but the log cannot know is decided here:

- ``runtime_s`` is the held time of the step's last attempt: a step that was preempted and requeued is
  taken to have resumed from a checkpoint, so earlier attempts' time is not work it still needed;
- a step that ended by release, expiry or cancellation while holding counts with the time it held;
  one rejected, cancelled while waiting, or still waiting or running at ``until`` is left out (its work
  is unknown), and counted in ``skipped`` by reason;
- ``checkpoint_s`` is unknown and left empty (a replayed preemption then loses the attempt's work).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from respools.model import EventKind
from respools.whatif.trace import TraceJob

_LEASE_ENDS = {EventKind.RELEASED, EventKind.EXPIRED, EventKind.CANCELLED, EventKind.PREEMPTED}


@dataclass
class _Step:
    submitted_at: datetime
    subject: str
    spec: dict[str, Any]
    granted_at: datetime | None = None
    last_attempt_s: float | None = None
    ended: str | None = None


@dataclass
class History:
    jobs: list[TraceJob] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)


def trace_from_events(events: Iterable[Mapping[str, Any]], since: datetime, until: datetime) -> History:
    """The steps submitted in ``[since, until)`` as trace jobs, ``submit_s`` counted from ``since``."""
    steps: dict[str, _Step] = {}
    for event in events:
        at = _instant(event["at"])
        kind, request_id = EventKind(event["kind"]), event.get("request_id")
        if request_id is None or at >= until:
            continue
        if kind == EventKind.SUBMITTED:
            if at >= since:
                steps[request_id] = _Step(at, event.get("subject") or "", dict(event.get("data") or {}))
            continue
        step = steps.get(request_id)
        if step is None:
            continue
        if kind == EventKind.GRANTED:
            step.granted_at, step.ended = at, None
        elif kind in _LEASE_ENDS and step.granted_at is not None:
            step.last_attempt_s = (at - step.granted_at).total_seconds()
            step.granted_at = None
            step.ended = None if kind == EventKind.PREEMPTED else kind.value
        elif kind == EventKind.REQUEUED:
            step.ended = None
        elif kind in (EventKind.REJECTED, EventKind.CANCELLED):  # while waiting: its work is unknown
            step.ended, step.last_attempt_s = kind.value, None
    history = History()
    for request_id, step in steps.items():
        if step.ended in (None, EventKind.REJECTED.value) or step.last_attempt_s is None:
            history.skipped["rejected" if step.ended == EventKind.REJECTED.value else "unfinished or never ran"] += 1
            continue
        if "resources" not in step.spec:
            history.skipped["submitted before events carried the spec"] += 1
            continue
        try:
            history.jobs.append(
                TraceJob(
                    id=request_id,
                    submit_s=(step.submitted_at - since).total_seconds(),
                    subject=step.subject,
                    pools=step.spec.get("pools"),
                    resources=step.spec["resources"],
                    replicas=step.spec.get("replicas", 1),
                    runtime_s=max(step.last_attempt_s, 0.001),
                    preemptible=step.spec.get("preemptible", False),
                    priority=step.spec.get("priority", 0),
                    max_retries=step.spec.get("max_retries", 0),
                )
            )
        except ValidationError:
            history.skipped["outside the trace's bounds"] += 1
    history.jobs.sort(key=lambda job: job.submit_s)
    return history


def _instant(value: str | datetime) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(value)
