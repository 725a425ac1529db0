"""``GroupKeys``: what a leader remembers of its queue between cycles must bucket the queue exactly as
reading every request again would, cycle after cycle, while requests come, go and get nominated."""

from __future__ import annotations

import random
from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st

from respools.model import Request
from respools.scheduling.requests import Buckets, GroupKeys, bucketed
from respools.simulation import T0

_cycles = st.lists(
    st.lists(
        st.tuples(
            st.integers(0, 60),  # request number: a later cycle sees some of the same requests again
            st.sampled_from([None, "p", "q"]),  # nominated pool, which may change from cycle to cycle
        ),
        max_size=30,
    ),
    min_size=1,
    max_size=6,
)


def _request(number: int, nominated: str | None) -> Request:
    """A fresh object each time, as the reconciler reads it from the store each cycle; its spec is a
    function of its id, as the store guarantees."""
    rnd = random.Random(number)
    return Request.model_validate(
        {
            "id": f"r{number:03d}",
            "subject": rnd.choice(["a", "b"]),
            "resources": {"gpu": rnd.choice([0.5, 1, 2])},
            "priority": rnd.choice([0, 1]),
            "selectors": rnd.choice([{}, {"zone": "z1"}]),
            "pools": rnd.choice([None, ["p", "q"]]),
            "submitted_at": T0 + timedelta(seconds=number // 3),
            "nominated_pool": nominated,
        }
    )


def _grouping(buckets: Buckets) -> dict[object, list[str]]:
    return {known.key: ids for known, _, ids, _ in buckets.values()}


@given(_cycles)
def test_a_remembered_queue_buckets_as_a_fresh_read_of_it(cycles: list[list[tuple[int, str | None]]]) -> None:
    keys = GroupKeys()
    for rows in cycles:
        nominated = dict(rows)  # one nomination per request and cycle
        queue = sorted((_request(n, pool) for n, pool in nominated.items()), key=lambda r: (r.submitted_at, r.id))
        assert _grouping(bucketed(queue, keys)) == _grouping(bucketed(queue))


def test_the_memo_keeps_what_is_still_queued_once_the_queue_has_turned_over() -> None:
    keys = GroupKeys()
    for start in range(0, 5000, 500):
        queue = [_request(n, None) for n in range(start, start + 1000)]  # half of it seen last time
        bucketed(queue, keys)
        assert len(keys.by_request) <= 2 * len(queue) + 1024
    assert {r.id for r in queue} <= set(keys.by_request), "what is queued stays known"
