"""Heartbeats, releases and submissions done together in one batch (``respools.server.db.joined``)
answer and write exactly what each would alone, on both stores — the common case in a few set-based
statements, every other case (errors, duplicates, preempting leases, replays) handed back to run alone.

Each test builds the same scene twice, runs one copy as one batch and the other call by call, and
compares what the callers heard and what the store holds."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from respools.model import Lease, Request, RequestSpec
from respools.server.db.database import Failed, Tx
from respools.server.db.tables import LEASES, REQUESTS
from respools.server.errors import ApiError
from respools.server.ops.leases import heartbeat_work, release_work
from respools.server.ops.requests import submission_of, submit_work
from respools.server.schemas import Principal
from respools.server.services import Services
from tests.server.conftest import Api

Work = Callable[[Tx], Any]


def services_of(api: Api) -> Services:
    services: Services = api.client.app.state.services  # type: ignore[attr-defined]
    return services


def principal(api: Api, token: str) -> Principal:
    found = services_of(api).tokens.lookup(token)
    assert found is not None
    return found


@dataclass
class Scene:
    """A subject's leases in every state a holder's call can meet, and another subject's lease."""

    own: Principal
    granted: str
    active: str
    preempting: str
    ended: str
    others: str

    def lease_ids(self) -> list[str]:
        return [self.granted, self.active, self.preempting, self.ended, self.others]


def scene(api: Api) -> Scene:
    world = api.world(capacity={"gpu": 8})
    other_token = api.add_subject(world, "other", reserved={"gpu": 1})
    granted, active, preempting, ended = (
        api.submit(world.token, resources={"gpu": 1}, max_retries=1)["lease_id"] for _ in range(4)
    )
    others = api.submit(other_token, resources={"gpu": 1})["lease_id"]
    assert None not in (granted, active, preempting, ended, others), "every request was granted"
    api.ok("POST", f"/v1/leases/{active}/heartbeat", world.token)
    api.ok("POST", f"/v1/leases/{preempting}/preempt", json={"grace_s": 600})
    api.ok("POST", f"/v1/leases/{ended}/release", world.token)
    api.ok("POST", f"/v1/pools/{world.pool}/drain")  # a request requeued by the calls stays queued
    return Scene(principal(api, world.token), granted, active, preempting, ended, others)


def heard(outcome: Any) -> Any:
    """What a caller hears, without the clock readings that differ between two runs."""
    if isinstance(outcome, Failed):
        assert isinstance(outcome.error, ApiError), outcome.error
        return outcome.error.status
    if isinstance(outcome, Lease):
        return (outcome.state.value, outcome.started_at is not None, outcome.released_at is not None)
    request, created = outcome
    assert isinstance(request, Request)
    return (request.state.value, created)


def stored(api: Api, lease_ids: Sequence[str]) -> list[tuple[Any, ...]]:
    """Each lease's state, whether it started and ended, and its request's state and attempt."""
    query = (
        sa.select(LEASES.c.state, LEASES.c.started_at, LEASES.c.released_at, REQUESTS.c.state, REQUESTS.c.attempt)
        .join(REQUESTS, REQUESTS.c.id == LEASES.c.request_id)
        .where(LEASES.c.id == sa.bindparam("id"))
    )
    rows = services_of(api).db.read(lambda conn: [conn.execute(query, {"id": i}).one() for i in lease_ids])
    return [(r[0], r[1] is not None, r[2] is not None, r[3], r[4]) for r in rows]


@contextmanager
def statements(api: Api) -> Iterator[list[str]]:
    """The statements this thread sends while inside (the reconciler's, on its own thread, are not)."""
    engine = services_of(api).db.write_engine
    sent: list[str] = []
    me = threading.get_ident()

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if threading.get_ident() == me:
            sent.append(statement)

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        yield sent
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)


def together_and_alone(api: Api, calls: Callable[[Scene], list[Work]]) -> tuple[Scene, list[Any], list[Any]]:
    """The calls on one scene as one batch, and on another call by call: what each caller heard."""
    db = services_of(api).db
    batched, one_by_one = scene(api), scene(api)
    outcomes = db.write_batch(calls(batched), durable=False)
    alone = [db.write_batch([work], durable=False)[0] for work in calls(one_by_one)]
    assert stored(api, batched.lease_ids()) == stored(api, one_by_one.lease_ids())
    return batched, [heard(o) for o in outcomes], [heard(o) for o in alone]


def test_heartbeats_together_answer_and_write_what_each_would_alone(api: Api) -> None:
    defs = services_of(api).definitions

    def calls(s: Scene) -> list[Work]:
        ids = [s.granted, s.active, s.preempting, s.ended, s.others, "lse_missing", s.granted]
        return [heartbeat_work(defs, s.own, lease_id) for lease_id in ids]

    batched, together, alone = together_and_alone(api, calls)
    assert together == alone
    assert together == [
        ("active", True, False),  # the first heartbeat starts the lease
        ("active", True, False),
        ("preempting", False, False),  # renewed, still under notice
        409,  # ended: it can no longer be renewed
        403,  # another subject's
        404,
        ("active", True, False),  # a second call on the same lease, after the first
    ]
    assert stored(api, [batched.granted])[0][3] == "active", "the request started with its lease"


def test_releases_together_answer_and_write_what_each_would_alone(api: Api) -> None:
    def calls(s: Scene) -> list[Work]:
        ids = [s.granted, s.active, s.preempting, s.ended, s.others, "lse_missing", s.active]
        return [release_work(s.own, lease_id) for lease_id in ids]

    batched, together, alone = together_and_alone(api, calls)
    assert together == alone
    assert together == [
        ("released", False, True),
        ("released", True, True),
        ("preempted", False, True),  # releasing under notice completes the preemption
        ("released", False, True),  # ended already: nothing changes
        403,
        404,
        ("released", True, True),
    ]
    lease_state, _, _, request_state, attempt = stored(api, [batched.preempting])[0]
    assert (lease_state, request_state, attempt) == ("preempted", "pending", 1), "requeued for its retry"


def test_live_leases_are_renewed_and_released_in_a_few_statements(api: Api) -> None:
    """The point of doing them together: statements per batch, not per call."""
    services = services_of(api)
    world = api.world(capacity={"gpu": 8})
    own = principal(api, world.token)
    leases = [api.submit(world.token, resources={"gpu": 1})["lease_id"] for _ in range(4)]
    assert None not in leases, "every request was granted"
    with statements(api) as heartbeats:
        beats = services.db.write_batch([heartbeat_work(services.definitions, own, i) for i in leases])
    with statements(api) as releases:
        ends = services.db.write_batch([release_work(own, i) for i in leases])
    assert [heard(o) for o in beats] == [("active", True, False)] * 4
    assert [heard(o) for o in ends] == [("released", True, True)] * 4
    # a lock of all four leases, their rows, their requests (plus BEGIN/COMMIT/NOTIFY where the store sends them)
    assert len([s for s in heartbeats if "leases" in s or "requests" in s]) == 3
    assert len([s for s in releases if "leases" in s or "requests" in s or "event" in s]) == 4


def test_submissions_together_answer_and_write_what_each_would_alone(api: Api) -> None:
    services = services_of(api)
    world = api.world(capacity={"gpu": 8})
    api.ok("POST", f"/v1/pools/{world.pool}/drain")  # nothing is granted: every request stays pending
    admin = principal(api, api.admin["Authorization"].removeprefix("Bearer "))
    own = principal(api, world.token)
    earlier = api.submit(world.token, wait=0, resources={"gpu": 1}, idempotency_key="earlier")

    def submission(who: Principal, key: str | None = None, **spec: Any) -> Work:
        body = RequestSpec.model_validate({"resources": {"gpu": 1}} | spec)
        return submit_work(services.definitions, submission_of(who, body, key))

    def calls(suffix: str) -> list[Work]:
        return [
            submission(own),
            submission(own, f"k-{suffix}"),
            submission(own, f"k-{suffix}"),  # the same key again: the first request, not a second
            submission(own, "earlier"),  # a retry of a request submitted before
            submission(own, pools=["no-such-pool"]),
            submission(admin, subject=world.subject),
        ]

    db = services.db
    with statements(api) as sent:
        together = db.write_batch(calls("batch"))
    inserts = [s for s in sent if s.lstrip().upper().startswith("INSERT INTO REQUESTS")]
    # The new requests in one statement, the replays and the refused one alone; the refusal reruns the
    # batch without it (that is how a failing work is kept from the others), so the insert runs twice.
    assert len(inserts) == 2
    alone = [db.write_batch([work])[0] for work in calls("alone")]
    assert [heard(o) for o in together] == [heard(o) for o in alone]
    assert [heard(o) for o in together] == [
        ("pending", True),
        ("pending", True),
        ("pending", False),
        ("pending", False),
        422,
        ("pending", True),
    ]
    ids = [o[0].id if isinstance(o, tuple) else None for o in together]
    assert ids[2] == ids[1], "the same request as the first use of its key"
    assert ids[3] == earlier["id"]

    # A subject that does not exist shows only in the insert, which then fails the batch as a whole:
    # each submission runs alone, and only that one is refused.
    with statements(api) as sent:
        mixed = db.write_batch([submission(own), submission(own), submission(admin, subject="nobody")])
    assert [heard(o) for o in mixed] == [("pending", True), ("pending", True), 422]
    inserts = [s for s in sent if s.lstrip().upper().startswith("INSERT INTO REQUESTS")]
    assert len(inserts) == 1 + 3 + 2, "together, then each alone, then again without the one refused"
