"""A queue kept bucketed as it changes, for a caller that sees every request arrive and leave.

``requests.bucketed`` reads every waiting request every cycle: right for the reconciler's leader, which
reads its queue from the store each cycle and cannot know what changed, but a replay's queue holds
thousands of requests of which a cycle changes a few, and reading them all was a quarter of a week's
replay (issue 26). A caller that changes its queue only through the methods below keeps the buckets
here instead and hands a copy to each cycle (``Snapshot.buckets``): the core then costs in proportion
to the groups, not to the requests.
"""

from __future__ import annotations

from bisect import bisect_left
from datetime import datetime

from respools.model import Request
from respools.scheduling.requests import Buckets, GroupKeys, KnownGroup, group_key


class KeptQueue:
    """The pending requests as ``bucketed(requests, keys)`` would bucket them, each bucket in queue
    order (submission time, then id) and the buckets in the order of their first request.

    ``keys`` must be the ``Memory.groups`` of the memory the cycles run with: the kept eligibility is
    keyed by the class numbers it gives out. The same rules hold as for ``GroupKeys``: a request's
    spec never changes, and its nomination changes only where the caller says so (``renominate``)."""

    def __init__(self, keys: GroupKeys) -> None:
        self.keys = keys
        self._buckets: dict[int, tuple[KnownGroup, list[Request], list[str], list[datetime]]] = {}
        self._group_of: dict[str, tuple[KnownGroup, datetime]] = {}
        """Each queued request's group and submission time: where to find it in its bucket."""

    def __len__(self) -> int:
        return len(self._group_of)

    def add(self, request: Request) -> None:
        """A request joins the queue at its place (a requeued one goes back to its submission time)."""
        fields = request.__dict__
        request_id, submitted = fields["id"], fields["submitted_at"]
        assert request_id not in self._group_of, f"{request_id} is queued already"
        key = group_key(fields)
        keys = self.keys
        known = keys.groups.get(key) or keys.first_seen(key)
        self._group_of[request_id] = (known, submitted)
        bucket = self._buckets.get(known.number)
        if bucket is None:
            self._buckets[known.number] = (known, [request], [request_id], [submitted])
            return
        _, members, ids, times = bucket
        if submitted > times[-1] or (submitted == times[-1] and request_id > ids[-1]):
            at = len(ids)  # an arrival: the newest of its group
        else:
            at = bisect_left(times, submitted)
            while at < len(ids) and times[at] == submitted and ids[at] < request_id:
                at += 1
        members.insert(at, request)
        ids.insert(at, request_id)
        times.insert(at, submitted)

    def discard(self, request_id: str) -> None:
        """A request leaves the queue (granted, rejected, or gone)."""
        known, submitted = self._group_of.pop(request_id)
        _, members, ids, times = self._buckets[known.number]
        at = bisect_left(times, submitted)
        while ids[at] != request_id:
            at += 1
        del members[at], ids[at], times[at]
        if not ids:
            del self._buckets[known.number]
            if len(self.keys.groups) > 2 * len(self._buckets) + 1024:
                self.keys.groups = {entry.key: entry for entry, _, _, _ in self._buckets.values()}

    def renominate(self, request: Request) -> None:
        """The request's nominated pool may have changed: it moves to the bucket of its new key."""
        request_id = request.__dict__["id"]
        if self._group_of[request_id][0].key[5] != request.__dict__["nominated_pool"]:
            self.discard(request_id)
            self.add(request)

    def buckets(self) -> Buckets:
        """A copy for one cycle, which may change its lists: the order of ``bucketed``'s."""
        ordered = sorted(self._buckets.values(), key=_first)
        return {known.number: (known, list(members), list(ids), list(times)) for known, members, ids, times in ordered}


def _first(bucket: tuple[KnownGroup, list[Request], list[str], list[datetime]]) -> tuple[datetime, str]:
    return (bucket[3][0], bucket[2][0])
