"""The input of one scheduling cycle: everything the core may look at, the clock included."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import TYPE_CHECKING

from respools.model import Lease, PolicySpec, PoolSpec, Request, ReservationSpec

if TYPE_CHECKING:
    from respools.scheduling.requests import Buckets
    from respools.scheduling.state import LeaseBooks


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A consistent view of the store at ``now``.

    ``leases`` are the live ones (granted, active, preempting); ``requests`` the pending ones. The core
    never reads a clock: deadlines and reservation windows are judged against ``now`` alone, so a cycle
    is a pure function of its snapshot and can be replayed.
    """

    now: datetime
    pools: Sequence[PoolSpec]
    policies: Sequence[PolicySpec]
    leases: Sequence[Lease] = ()
    requests: Sequence[Request] = ()
    reservations: Sequence[ReservationSpec] = field(default_factory=tuple)
    buckets: Buckets | None = None
    """``requests`` already bucketed (``requests.bucketed`` with the memory's group keys), from a caller
    that keeps them as its queue changes (``queue.KeptQueue``), or None: the cycle buckets ``requests``.
    Given, the cycle reads the buckets and not ``requests``: it costs in proportion to the groups."""
    books: LeaseBooks | None = None
    """``leases`` already summed per pool and subject, from a caller that keeps them so as leases come
    and go (``books.KeptLeases``), or None: the cycle sums ``leases``. Given, the cycle reads the books
    and not ``leases``: it costs in proportion to the subjects and the leases under notice."""

    def __setstate__(self, state: list[object]) -> None:
        """A snapshot pickled before the last fields were added (benchmarks save snapshots with one
        version of the core and count another on them) gets their defaults."""
        for index, each in enumerate(fields(self)):
            factory = each.default_factory
            value = state[index] if index < len(state) else factory() if callable(factory) else each.default
            object.__setattr__(self, each.name, value)
