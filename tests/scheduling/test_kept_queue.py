"""``KeptQueue``: a queue kept bucketed as requests come, go and get nominated must hand each cycle
exactly the buckets that bucketing the whole queue afresh gives: the same groups in the same order,
each with the same requests in the same order."""

from __future__ import annotations

import pickle
from dataclasses import fields

import pytest
from hypothesis import given
from hypothesis import strategies as st

from respools.model import Request
from respools.scheduling import Memory, Snapshot, schedule
from respools.scheduling.queue import KeptQueue
from respools.scheduling.requests import Buckets, GroupKeys, bucketed
from respools.simulation import T0

from .test_group_keys import _request

_steps = st.lists(
    st.tuples(
        st.sampled_from(["add", "add", "discard", "nominate"]),
        st.integers(0, 40),  # request number: its spec (and submission time) is a function of it
        st.sampled_from([None, "p", "q"]),  # the nomination given to an added or nominated request
    ),
    max_size=80,
)


def _layout(buckets: Buckets) -> list[object]:
    return [(known.key, [id(r) for r in members], ids, times) for known, members, ids, times in buckets.values()]


@given(_steps)
def test_kept_buckets_are_those_of_the_whole_queue(steps: list[tuple[str, int, str | None]]) -> None:
    keys = GroupKeys()
    kept = KeptQueue(keys)
    queued: dict[int, Request] = {}
    for action, number, pool in steps:
        if action == "add" and number not in queued:
            queued[number] = _request(number, pool)
            kept.add(queued[number])
        elif action == "discard" and number in queued:
            kept.discard(queued.pop(number).id)
        elif action == "nominate" and number in queued:
            queued[number].nominated_pool = pool
            kept.renominate(queued[number])
        queue = sorted(queued.values(), key=lambda r: (r.submitted_at, r.id))
        buckets = kept.buckets()
        assert _layout(buckets) == _layout(bucketed(queue))
        assert all(keys.groups[known.key] is known for known, _, _, _ in buckets.values())
        assert len(kept) == len(queued)


def test_a_cycle_may_change_its_copy() -> None:
    kept = KeptQueue(GroupKeys())
    for number in range(6):
        kept.add(_request(number, None))
    before = _layout(kept.buckets())
    for _, members, ids, times in kept.buckets().values():
        members.clear()
        ids.clear()
        times.clear()
    assert _layout(kept.buckets()) == before


def test_a_request_is_queued_once() -> None:
    kept = KeptQueue(GroupKeys())
    kept.add(_request(1, None))
    with pytest.raises(AssertionError):
        kept.add(_request(1, None))


def test_buckets_keyed_by_other_keys_than_the_memorys_are_refused() -> None:
    """The memory's kept eligibility is filed by the class numbers of its own group keys: buckets
    numbered by other keys would read another class's."""
    kept = KeptQueue(GroupKeys())
    kept.add(_request(1, None))
    snapshot = Snapshot(now=T0, pools=[], policies=[], requests=[], buckets=kept.buckets())
    with pytest.raises(ValueError, match="group keys"):
        schedule(snapshot, Memory())
    assert [reject.request_id for reject in schedule(snapshot).rejects] == ["r001"], "without a memory: fine"


def test_a_snapshot_pickled_before_the_kept_fields_loads_without_them() -> None:
    """``benchmarks/cycle_instructions.py --snapshots`` counts one version of the core on snapshots
    another version saved."""
    snapshot = Snapshot(now=T0, pools=[], policies=[], requests=[_request(1, None)])
    old = Snapshot.__new__(Snapshot)
    old.__setstate__([getattr(snapshot, each.name) for each in fields(snapshot)][:4])
    assert old == Snapshot(now=T0, pools=[], policies=[], leases=(), requests=())
    assert pickle.loads(pickle.dumps(snapshot)) == snapshot
