"""Requests: submit (idempotently), read, list, cancel."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from starlette.concurrency import run_in_threadpool

from respools.model import EventKind, Request, RequestSpec, RequestState, Role
from respools.server.auth import require_owner, require_writer
from respools.server.codec import WAIT_CLEARED, request_of, request_spec_document
from respools.server.db.database import Database, Tx
from respools.server.db.group_commit import GroupCommit
from respools.server.db.joined import ALONE, Alone, Joinable, Kind, RunAlone
from respools.server.db.statements import (
    INSERT_REQUEST_OF_SUBJECT,
    KEYS_IN_USE,
    LEASE_BY_ID_LOCKED,
    REQUEST_BY_ID,
    REQUEST_BY_ID_LOCKED,
    REQUEST_BY_KEY,
    REQUESTS_BY_IDS,
)
from respools.server.db.tables import REQUESTS
from respools.server.definitions import DefinitionsCache
from respools.server.errors import ApiError, conflict, forbidden, invalid, not_found
from respools.server.events import append, event_row
from respools.server.lifecycle import LIVE, update_lease, update_request
from respools.server.schemas import Principal


def new_request_id() -> str:
    return "req_" + uuid.uuid4().hex


def subject_for(principal: Principal, spec: RequestSpec) -> str:
    """The subject a request is for: a subject token's own; an admin names it."""
    require_writer(principal)
    if principal.role == Role.SUBJECT:
        assert principal.subject is not None
        if spec.subject is not None and spec.subject != principal.subject:
            raise forbidden(f"your token is for subject {principal.subject!r}; it cannot submit for {spec.subject!r}")
        return principal.subject
    if spec.subject is None:
        raise invalid("an admin token must name the subject the request is for", "subject")
    return spec.subject


def _check_pools(defs: DefinitionsCache, spec: RequestSpec) -> None:
    if spec.pools is None:
        return
    if not spec.pools:
        raise invalid("pools is empty: leave it out to use every pool the subject has a policy on", "pools")
    known = defs.get().pools
    for i, name in enumerate(spec.pools):
        if name not in known:
            raise invalid(f"pool {name!r} does not exist: fix the name or leave pools out", f"pools[{i}]")


def _pools_exist(defs: DefinitionsCache, spec: RequestSpec) -> bool:
    try:
        _check_pools(defs, spec)
    except ApiError:
        return False
    return True


def _same_request(row: sa.RowMapping, spec: RequestSpec) -> bool:
    return dict(row["spec"]) == request_spec_document(spec)


def _existing(tx_or_conn: sa.Connection, subject: str, key: str) -> sa.RowMapping | None:
    return tx_or_conn.execute(REQUEST_BY_KEY, {"k_subject": subject, "k_key": key}).mappings().first()


def _replay(row: sa.RowMapping, spec: RequestSpec) -> Request:
    if not _same_request(row, spec):
        raise conflict(
            f"idempotency key {row['idempotency_key']!r} was used for a different request ({row['id']}): "
            "use a new key for a new request",
            "idempotency_key",
        )
    return request_of(row)


TRACED_FIELDS = {"labels", "resources", "replicas", "preemptible", "priority", "pools", "max_retries"}
"""What a submission's event carries of its spec, so the event log alone replays as a trace
(``respools trace export``)."""


@dataclass(frozen=True, slots=True)
class Submission:
    """A request to queue, checked as far as it can be without the store."""

    subject: str
    key: str | None
    spec: RequestSpec
    document: dict[str, Any]
    request_id: str


def _queue(tx: Tx, submissions: Sequence[Submission]) -> list[Request] | None:
    """Insert the submissions' requests and their events; ``None`` (having inserted only some) when a
    subject does not exist."""
    rows = [
        {
            "id": s.request_id,
            "subject": s.subject,
            "idempotency_key": s.key,
            "state": RequestState.PENDING.value,
            "spec": s.document,
            "submitted_at": tx.now,
            "queued_at": tx.now,
            "attempt": 0,
            "updated_at": tx.now,
        }
        for s in submissions
    ]
    if tx.conn.execute(INSERT_REQUEST_OF_SUBJECT, rows).rowcount != len(rows):
        return None
    events = [
        event_row(
            tx.now,
            EventKind.SUBMITTED,
            f"request {s.request_id} submitted",
            subject=s.subject,
            request_id=s.request_id,
            data=s.spec.model_dump(mode="json", include=TRACED_FIELDS),
        )
        for s in submissions
    ]
    append(tx, events)
    # Not in ``changes.requests``: no long-poll can need this news. The only waiter a brand-new id has
    # is the submitter, who answers from the row it wrote; whoever learns the id later reads the row
    # after this commit. Announcing it only woke the submitter's own long-poll into re-reading a
    # request it had just written (a thread hop and a query per submit).
    tx.changes.wake = True
    return [request_of(row | _EMPTY_DECISION) for row in rows]


@dataclass(frozen=True, slots=True)
class Submits(Kind[Submission, tuple[Request, bool]]):
    """Queues new requests together; a retry of an earlier request (its key is known), a second use of
    one key in the batch, an unknown pool or subject run alone, where their answers are."""

    defs: DefinitionsCache

    def together(self, tx: Tx, items: Sequence[Submission]) -> list[tuple[Request, bool] | Alone]:
        keys = sorted({(s.subject, s.key) for s in items if s.key is not None})
        taken: set[tuple[str, str | None]] = (
            set(tx.conn.execute(KEYS_IN_USE, {"k_keys": keys}).tuples()) if keys else set()
        )
        fresh: list[Submission] = []
        for submission in items:
            key = (submission.subject, submission.key)
            if key in taken or not _pools_exist(self.defs, submission.spec):
                continue
            if submission.key is not None:
                taken.add(key)  # a second use in this batch runs alone, after the first is written
            fresh.append(submission)
        queued = _queue(tx, fresh) if fresh else []
        if queued is None:
            raise RunAlone(f"a subject of {len(fresh)} submissions does not exist")
        by_id = {request.id: (request, True) for request in queued}
        return [by_id.get(s.request_id, ALONE) for s in items]


async def submit(
    writes: GroupCommit,
    defs: DefinitionsCache,
    principal: Principal,
    spec: RequestSpec,
    header_key: str | None,
    request_id: str | None = None,
) -> tuple[Request, bool]:
    """Queue a request; a retry with the same idempotency key returns the first one (``created`` false).

    ``request_id`` lets a caller that wants to wait for the decision watch the id before it exists. The
    insert joins the group commit; a conflict on the idempotency key (a retry racing the first request)
    is answered by reading the request that won."""
    submission = submission_of(principal, spec, header_key, request_id)
    try:
        return await writes.write(submit_work(defs, submission))
    except IntegrityError:
        if submission.key is None:
            raise
        key = submission.key
        row = await run_in_threadpool(writes.db.read, lambda conn: _existing(conn, submission.subject, key))
        if row is None:
            raise
        return _replay(row, spec), False


def submission_of(
    principal: Principal, spec: RequestSpec, header_key: str | None, request_id: str | None = None
) -> Submission:
    """What ``principal`` submits, checked as far as it can be without the store."""
    subject = subject_for(principal, spec)
    if header_key is not None and spec.idempotency_key is not None and header_key != spec.idempotency_key:
        raise invalid("the Idempotency-Key header and the body's idempotency_key differ: send one", "idempotency_key")
    key = header_key if header_key is not None else spec.idempotency_key
    if key is not None and not 0 < len(key) <= 200:
        raise invalid("an idempotency key has 1 to 200 characters", "idempotency_key")
    return Submission(subject, key, spec, request_spec_document(spec), request_id or new_request_id())


def submit_work(defs: DefinitionsCache, submission: Submission) -> Joinable[Submission, tuple[Request, bool]]:
    """A submission's work in a write transaction, alone or with others (see :func:`submit`)."""

    def alone(tx: Tx) -> tuple[Request, bool]:
        spec, subject, key = submission.spec, submission.subject, submission.key
        _check_pools(defs, spec)  # here, off the event loop: the definitions may need reading
        if key is not None:
            row = _existing(tx.conn, subject, key)
            if row is not None:
                return _replay(row, spec), False
        queued = _queue(tx, [submission])
        if queued is None:
            raise invalid(f"subject {subject!r} does not exist: ask an admin to create it", "subject")
        return queued[0], True

    return Joinable(Submits(defs), submission, alone)


_EMPTY_DECISION = {"reason": None, "lease_id": None, **WAIT_CLEARED}


def fetch(conn: sa.Connection, request_id: str) -> Request | None:
    row = conn.execute(REQUEST_BY_ID, {"k_id": request_id}).mappings().first()
    return None if row is None else request_of(row)


def fetch_many(conn: sa.Connection, request_ids: list[str]) -> dict[str, Request]:
    """The requests of ``request_ids`` that exist, by id, in one statement."""
    return {row["id"]: request_of(row) for row in conn.execute(REQUESTS_BY_IDS, {"k_ids": request_ids}).mappings()}


def get_request(db: Database, principal: Principal, request_id: str) -> Request:
    request = db.read(lambda conn: fetch(conn, request_id))
    if request is None:
        raise not_found("request", request_id, "request_id")
    require_owner(principal, request.subject, f"request {request_id}")
    return request


def list_requests(
    db: Database,
    *,
    subject: str | None = None,
    states: list[RequestState] | None = None,
    label: tuple[str, str] | None = None,
    before: datetime | None = None,
    limit: int = 100,
) -> list[Request]:
    query = sa.select(REQUESTS).order_by(REQUESTS.c.submitted_at.desc(), REQUESTS.c.id).limit(limit)
    if subject is not None:
        query = query.where(REQUESTS.c.subject == subject)
    if states:
        query = query.where(REQUESTS.c.state.in_([s.value for s in states]))
    if before is not None:
        query = query.where(REQUESTS.c.submitted_at < before)
    rows = db.read(lambda conn: list(conn.execute(query).mappings()))
    requests = [request_of(row) for row in rows]
    if label is not None:
        requests = [r for r in requests if r.labels.get(label[0]) == label[1]]
    return requests


def cancel(db: Database, principal: Principal, request_id: str) -> Request:
    """Withdraw a request: a pending one leaves the queue, one holding a lease releases it. Cancelling a
    finished request changes nothing."""
    require_writer(principal)

    def work(tx: Tx) -> Request:
        row = tx.conn.execute(REQUEST_BY_ID, {"k_id": request_id}).mappings().first()
        if row is None:
            raise not_found("request", request_id, "request_id")
        require_owner(principal, row["subject"], f"request {request_id}")
        lease_row = None
        if row["lease_id"] is not None:  # lock the lease before the request, as release does
            lease_row = tx.conn.execute(LEASE_BY_ID_LOCKED, {"k_id": row["lease_id"]}).mappings().first()
        row = tx.conn.execute(REQUEST_BY_ID_LOCKED, {"k_id": request_id}).mappings().one()
        state = RequestState(row["state"])
        if state not in {RequestState.PENDING} | {RequestState(s) for s in LIVE}:
            return request_of(row)
        events = []
        if lease_row is not None and lease_row["state"] in LIVE and lease_row["id"] == row["lease_id"]:
            update_lease(tx, lease_row["id"], state=RequestState.RELEASED.value, released_at=tx.now)
        update_request(
            tx,
            request_id,
            state=RequestState.CANCELLED.value,
            reason="cancelled by its owner",
            wait_pool=None,
            **WAIT_CLEARED,
        )
        events.append(
            event_row(
                tx.now,
                EventKind.CANCELLED,
                f"request {request_id} cancelled",
                pool=lease_row["pool"] if lease_row is not None else None,
                subject=row["subject"],
                request_id=request_id,
                lease_id=row["lease_id"],
            )
        )
        append(tx, events)
        tx.changes.wake = True
        updated = tx.conn.execute(REQUEST_BY_ID, {"k_id": request_id}).mappings().one()
        return request_of(updated)

    return db.write(work)
