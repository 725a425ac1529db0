"""Live leases kept summed per pool and subject as they change, for a caller that sees every lease
granted and ended.

``build_pools`` charges every live lease to its subject and pool every cycle, although a cycle changes
a few of them: that loop (with the deadline check before it) was a third of a week's replay once the
queue was kept bucketed (issue 26), and most of the reconciler leader's cycle at 10,000 held leases
(issue 25). A caller that knows which leases came, went or moved (the replay, which makes every change;
the leader's copy of the live leases, ``server.reconciler.live_leases``, which compares what it reads)
keeps the sums here and hands a copy to each cycle (``Snapshot.books``), which then costs in proportion
to the subjects and the leases under notice.
"""

from __future__ import annotations

import itertools
from bisect import insort
from datetime import datetime
from operator import attrgetter

from respools.model import Lease, RequestState
from respools.scheduling.state import LeaseBooks, LeaseView
from respools.scheduling.vectors import Vector

_BY_ID = attrgetter("id")


class KeptLeases:
    """The live leases of a caller, summed as ``build_pools`` sums them.

    The caller says when a lease is granted (``add``), when it ends (``discard``), and when any of its
    state, ``preempted_for``, ``overdue_since`` or ``expires_at`` changes (``changed``): what is kept
    is read from the leases at those calls only. Its snapshot's leases are then those added and not
    discarded, in the order they were added."""

    def __init__(self) -> None:
        self._leases: dict[str, Lease] = {}
        self._views: dict[str, LeaseView] = {}
        self._held: dict[str, dict[str, tuple[Vector, list[LeaseView]]]] = {}
        """Per pool and subject, its usage and its leases' views in id order."""
        self._preempting: dict[str, tuple[int, Lease]] = {}
        """The leases under notice, with the number of their ``add``: their place in the snapshot."""
        self._added: dict[str, int] = {}
        self._adds = itertools.count()
        self._earliest: datetime | None = None
        """No kept lease's ``expires_at`` is before this (None: no lease)."""

    def __len__(self) -> int:
        return len(self._leases)

    def add(self, lease: Lease) -> None:
        fields = lease.__dict__
        lease_id = fields["id"]
        assert lease_id not in self._leases, f"{lease_id} is kept already"
        view = LeaseView.of(lease)
        self._leases[lease_id], self._views[lease_id] = lease, view
        self._added[lease_id] = next(self._adds)
        usage, views = self._held.setdefault(view.pool, {}).setdefault(view.subject, ({}, []))
        for key, amount in view.resources.items():
            usage[key] = usage.get(key, 0) + amount
        insort(views, view, key=_BY_ID)
        self.changed(lease)

    def discard(self, lease_id: str) -> None:
        del self._leases[lease_id]
        view = self._views.pop(lease_id)
        del self._added[lease_id]
        self._preempting.pop(lease_id, None)
        subjects = self._held[view.pool]
        usage, views = subjects[view.subject]
        views.remove(view)
        if not views:
            del subjects[view.subject]
            if not subjects:
                del self._held[view.pool]
            return
        for key, amount in view.resources.items():
            left = usage[key] - amount
            if left:
                usage[key] = left
            else:
                del usage[key]  # as summing the leases left would give: no such key

    def changed(self, lease: Lease) -> None:
        """Read again what may change of a kept lease: its state, who preempted it, since when it is
        overdue, and when it expires."""
        fields = lease.__dict__
        lease_id = fields["id"]
        self._leases[lease_id] = lease  # the same object, or a new model of the same lease
        view = self._views[lease_id]
        view.preempting = fields["state"] == RequestState.PREEMPTING
        view.preempted_for, view.overdue_since = fields["preempted_for"], fields["overdue_since"]
        if view.preempting:
            self._preempting[lease_id] = (self._added[lease_id], lease)
        else:
            self._preempting.pop(lease_id, None)
        expires = fields["expires_at"]
        if self._earliest is None or expires < self._earliest:
            self._earliest = expires

    def books(self, now: datetime) -> LeaseBooks | None:
        """A copy for a cycle at ``now``, or None when a lease may expire by then (the cycle then
        reads every lease, as it must to expire or revoke them)."""
        if self._earliest is not None and self._earliest <= now:
            self._earliest = min((lease.__dict__["expires_at"] for lease in self._leases.values()), default=None)
            if self._earliest is not None and self._earliest <= now:
                return None
        held = {
            pool: sorted(
                ((subject, dict(usage), list(views)) for subject, (usage, views) in subjects.items()),
                key=_first_lease,
            )
            for pool, subjects in self._held.items()
        }
        preempting = [lease for _, lease in sorted(self._preempting.values(), key=_added)]
        return LeaseBooks(held, preempting, self._leases, self._views)


def _first_lease(entry: tuple[str, Vector, list[LeaseView]]) -> str:
    return entry[2][0].id


def _added(entry: tuple[int, Lease]) -> int:
    return entry[0]
