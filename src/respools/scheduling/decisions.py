"""The output of one scheduling cycle. The reconciler commits all of them in one transaction."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from respools.model import Placement, PreemptReason, Resources, WaitReason


@dataclass(frozen=True, slots=True)
class Grant:
    """``resources`` and ``borrowed`` are in internal units, ready for ``Lease(resources=...)``."""

    request_id: str
    pool: str
    resources: Resources
    borrowed: Resources
    placement: Placement


@dataclass(frozen=True, slots=True)
class Reject:
    """The request can never fit (DESIGN §2.1); ``reason`` is written for the person who asked."""

    request_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class Preempt:
    """Give ``lease_ids`` notice so that ``request_id`` fits in ``pool``; the waiter is nominated there
    and the capacity being freed is held for it."""

    request_id: str
    pool: str
    lease_ids: tuple[str, ...]
    reason: PreemptReason
    message: str


@dataclass(frozen=True, slots=True)
class Wait:
    request_id: str
    reason: WaitReason
    message: str
    position: int
    pool: str | None = None


@dataclass(slots=True)  # not frozen: one per waiting group per cycle, and frozen init costs twice as much
class WaitRun:
    """Requests that wait for one reason at consecutive queue positions, the first at ``first_position``.

    A long queue mostly waits in look-alike groups that fail together; one run per group, rather than
    one object per request, keeps the cycle's output (and its consumers' work) proportional to the
    groups, not the queue."""

    request_ids: list[str]
    reason: WaitReason
    message: str
    first_position: int
    pool: str | None = None

    def __iter__(self) -> Iterator[Wait]:
        reason, message, pool = self.reason, self.message, self.pool
        for position, request_id in enumerate(self.request_ids, self.first_position):
            yield Wait(request_id, reason, message, position, pool)


@dataclass(frozen=True, slots=True)
class Expire:
    """A lease whose heartbeats stopped (or that never started) past its deadline: capacity returns."""

    lease_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class Overdue:
    """A preempting lease that passed its grace deadline unreleased: its backend must stop the workload.
    Its capacity stays held (DESIGN §2.8) until its holder releases it, the backend confirms the stop, or
    the holder falls silent for a full TTL (then :class:`Revoke`)."""

    lease_id: str


@dataclass(frozen=True, slots=True)
class Revoke:
    """A preempting lease past its grace deadline whose holder has also been silent for a full TTL: its
    capacity returns (a silent holder is taken for gone)."""

    lease_id: str


@dataclass(slots=True)
class Decisions:
    grants: list[Grant] = field(default_factory=list)
    rejects: list[Reject] = field(default_factory=list)
    preemptions: list[Preempt] = field(default_factory=list)
    wait_runs: list[WaitRun] = field(default_factory=list)
    expiries: list[Expire] = field(default_factory=list)
    revocations: list[Revoke] = field(default_factory=list)
    overdue: list[Overdue] = field(default_factory=list)

    @property
    def waits(self) -> list[Wait]:
        """Every waiting request, one object each: for readers that want them one by one (tests, the
        simulation); the reconciler reads ``wait_runs``."""
        return [wait for run in self.wait_runs for wait in run]

    @property
    def waiting(self) -> int:
        return sum(len(run.request_ids) for run in self.wait_runs)
