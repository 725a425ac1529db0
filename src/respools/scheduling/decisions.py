"""The output of one scheduling cycle. The reconciler commits all of them in one transaction."""

from __future__ import annotations

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


@dataclass(slots=True)  # not frozen: one per waiting request per cycle, and frozen init costs twice as much
class Wait:
    request_id: str
    reason: WaitReason
    message: str
    position: int
    pool: str | None = None


@dataclass(frozen=True, slots=True)
class Expire:
    """A lease whose heartbeats stopped (or that never started) past its deadline: capacity returns."""

    lease_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class Revoke:
    """A preempting lease whose grace deadline passed: capacity returns and the backend stops it."""

    lease_id: str


@dataclass(slots=True)
class Decisions:
    grants: list[Grant] = field(default_factory=list)
    rejects: list[Reject] = field(default_factory=list)
    preemptions: list[Preempt] = field(default_factory=list)
    waits: list[Wait] = field(default_factory=list)
    expiries: list[Expire] = field(default_factory=list)
    revocations: list[Revoke] = field(default_factory=list)
