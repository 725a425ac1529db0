"""The queue's order inside a group: oldest first, ties by id, whatever order the store hands it over in.

``bucketed`` trusts the order it is given only after checking it in the same pass; these properties
hold it to a plain sort of the whole queue, in order, shuffled, and with tied submission times.
"""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st

from respools.model import Request
from respools.scheduling.requests import bucketed
from respools.simulation import T0

_requests = st.lists(
    st.tuples(
        st.integers(0, 5),  # submission second: few values, so that ties are common
        st.sampled_from(["a", "b"]),  # subject
        st.sampled_from([0.5, 1, 2]),  # gpu
        st.integers(0, 1),  # request priority
    ),
    max_size=40,
)


def _queue(rows: list[tuple[int, str, float, int]]) -> list[Request]:
    return [
        Request.model_validate(
            {
                "id": f"r{index:03d}",
                "subject": subject,
                "resources": {"gpu": gpu},
                "priority": priority,
                "submitted_at": T0 + timedelta(seconds=second),
            }
        )
        for index, (second, subject, gpu, priority) in enumerate(rows)
    ]


def _expected(queue: list[Request]) -> dict[object, list[str]]:
    """Buckets by a plain sort of the whole queue, keyed by what a group shares."""
    out: dict[object, list[str]] = {}
    for request in sorted(queue, key=lambda r: (r.submitted_at, r.id)):
        out.setdefault((request.subject, request.resources["gpu"], request.priority), []).append(request.id)
    return out


def _got(queue: list[Request]) -> dict[object, list[str]]:
    buckets = bucketed(queue)
    out: dict[object, list[str]] = {}
    for _, bucket, ids, times in buckets.values():
        first = bucket[0]
        assert [r.id for r in bucket] == ids, "ids run parallel to their requests"
        assert [r.submitted_at for r in bucket] == times, "and so do submission times"
        out[(first.subject, first.resources["gpu"], first.priority)] = ids
    return out


@given(_requests, st.randoms(use_true_random=False))
def test_buckets_are_in_queue_order_whatever_order_the_queue_comes_in(
    rows: list[tuple[int, str, float, int]], rnd: object
) -> None:
    queue = _queue(rows)
    shuffled = list(queue)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    assert _got(shuffled) == _expected(queue)
    in_order = sorted(queue, key=lambda r: (r.submitted_at, r.id))
    assert _got(in_order) == _expected(queue)


def test_a_tie_in_submission_time_is_broken_by_id_even_when_handed_over_the_other_way() -> None:
    late, early = _queue([(1, "a", 1, 0), (1, "a", 1, 0)])  # same second: r000, r001
    ((_, _, ids, _),) = bucketed([early, late]).values()
    assert ids == ["r000", "r001"]
