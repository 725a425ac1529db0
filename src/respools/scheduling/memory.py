"""What a caller that schedules cycle after cycle keeps from one cycle to the next.

The reconciler's leader and the simulation schedule the same pools, leases and queue again and again,
each cycle a little different from the one before. Much of what a cycle derives depends only on
inputs that never change once written: a request's spec, a lease's grant, a pool's spec. A
``Memory`` keeps those derivations, so that a steady cycle reads only what can have changed. The
cycle stays a function of its snapshot: decisions are the same with or without a memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from respools.model import PolicySpec, PoolSpec, ReservationSpec
from respools.scheduling.requests import GroupKeys
from respools.scheduling.state import Kept

KeptEligibility = tuple[tuple[str, ...], str | None, tuple[object, ...]]
"""A class of requests' candidate pools, rejection and signature (``Eligibility`` without the cycle's
own accounting objects)."""


@dataclass(eq=False)
class Memory:
    """Sound where ids are never reused and what they name never changes: a request's spec (the store
    refuses an idempotent resubmission that asks differently), a lease's grant, and a pool, policy or
    reservation object as handed over in snapshots (a changed definition is a new object, which is
    how the store's definitions cache and the simulation hand them over).

    One memory serves one caller at a time; it is not shared between threads."""

    groups: GroupKeys = field(default_factory=GroupKeys)
    """Each waiting request's group key (``GroupKeys``)."""
    accounting: Kept = field(default_factory=Kept)
    """Pool facts and lease views (``Kept``), which the accounting of each cycle starts from."""
    eligibility: dict[int, KeptEligibility] = field(default_factory=dict)
    """Per eligibility class (``KnownGroup.eligibility_class``), what classifying it found, valid
    while ``definitions`` names the same objects."""
    definitions: tuple[object, ...] = ()
    """The definitions objects the kept eligibility was judged on (held, so that their ids stay theirs)."""

    def eligibility_for(
        self,
        now: datetime,
        pools: Sequence[PoolSpec],
        policies: Sequence[PolicySpec],
        reservations: Sequence[ReservationSpec],
    ) -> dict[int, KeptEligibility]:
        """The kept eligibility, emptied first unless the cycle has the same definitions as the one
        it was judged on (the same pool, policy and unended reservation objects), and kept no larger
        than the classes the queue still has."""
        definitions = (*pools, None, *policies, None, *(r for r in reservations if r.end > now))
        kept = self.definitions
        if len(kept) != len(definitions) or any(a is not b for a, b in zip(kept, definitions, strict=True)):
            self.eligibility = {}
            self.definitions = definitions
        classes = self.groups.classes
        if len(self.eligibility) > 2 * len(classes) + 1024:
            live = set(classes.values())
            self.eligibility = {number: found for number, found in self.eligibility.items() if number in live}
        return self.eligibility
