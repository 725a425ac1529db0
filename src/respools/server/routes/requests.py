"""``/v1/requests``: submit, read, long-poll, cancel."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Header, Query, Response, status
from starlette.concurrency import run_in_threadpool

from respools.model import MAX_BATCH_IDS, ItemError, Request, RequestSpec, RequestState, RequestsWatch, WatchedRequests
from respools.server.auth import require_owner, visible_subject
from respools.server.errors import forbidden, invalid, not_found
from respools.server.ops import requests
from respools.server.routes.answers import model_answer
from respools.server.routes.deps import ERRORS, MAX_WAIT_S, Auth, NameFilter, ServicesDep
from respools.server.schemas import Principal
from respools.server.services import Services
from respools.server.watchers import RequestWatch, Waiter

router = APIRouter(prefix="/v1/requests", tags=["requests"], responses=ERRORS)


def _timeout(services: Services, timeout: float, field: str) -> float:
    if timeout > services.settings.max_wait_s:
        raise invalid(f"wait at most {services.settings.max_wait_s:g} seconds per call, then call again", field)
    return timeout


def _watch(services: Services) -> RequestWatch:
    watch = services.request_watch
    assert watch is not None, "the lifespan attaches the watch"
    return watch


async def _until_changed(
    services: Services, changed: Waiter, request: Request, target: RequestState, timeout: float
) -> Request:
    """Re-read ``request`` whenever it is said to have changed, until its state leaves ``target`` or
    ``timeout`` passes. The caller registered ``changed`` before its first read.

    A grant of the pending request (by any replica's reconciler) is answered from the grant, without
    reading the store again. Nothing is read while nothing changes: a lost notification is caught by
    the process's one periodic recheck of every watched request (:meth:`RequestWatch.recheck`)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    request_id = request.id
    watch = _watch(services)
    changed.targets[request_id] = target.value
    while request.state == target:
        remaining = deadline - loop.time()
        if remaining <= 0:
            break
        try:
            async with asyncio.timeout(remaining):  # no task per wait, unlike wait_for
                await changed.wait()
        except TimeoutError:
            break  # unchanged as far as this process heard: answered as last read
        grant = watch.granted(request_id)
        changed.take_changed()
        granted = grant.applied_to(request) if grant is not None else None
        if granted is not None:
            request = granted
            continue
        fresh = await run_in_threadpool(services.db.read, lambda conn: requests.fetch(conn, request_id))
        if fresh is None:
            raise not_found("request", request_id, "request_id")
        request = fresh
    return request


async def wait_for_change(
    services: Services, principal: Principal, request_id: str, state: RequestState | None, timeout: float
) -> Request:
    """The request once its state differs from ``state`` (default: its state now), or after ``timeout``."""
    with _watch(services).watch(request_id) as changed:
        request = await services.request_reads.get(request_id)
        if request is None:
            raise not_found("request", request_id, "request_id")
        require_owner(principal, request.subject, f"request {request_id}")
        return await _until_changed(services, changed, request, state or request.state, timeout)


@router.post(
    "",
    response_model=Request,
    status_code=status.HTTP_201_CREATED,
    summary="Submit a request",
    description="With an idempotency key (header or body) a retry returns the first request (200). "
    "With `wait`, the answer comes once the request leaves `pending` (granted, rejected…) or after that "
    "many seconds, saving a round trip.",
    responses={200: {"model": Request, "description": "An earlier request with the same idempotency key"}},
)
async def submit(
    spec: RequestSpec,
    services: ServicesDep,
    principal: Auth,
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key", min_length=1, max_length=200)] = None,
    wait: Annotated[float, Query(ge=0, le=MAX_WAIT_S, description="seconds to wait for a decision")] = 0,
) -> Response:
    _timeout(services, wait, "wait")
    new_id = requests.new_request_id()
    with _watch(services).watch(new_id) as changed:  # watching before the insert: no change can slip by
        request, created = await requests.submit(
            services.writes, services.definitions, principal, spec, idempotency_key, new_id
        )
        if wait > 0 and request.state == RequestState.PENDING:
            if created:
                request = await _until_changed(services, changed, request, RequestState.PENDING, wait)
            else:
                request = await wait_for_change(services, principal, request.id, RequestState.PENDING, wait)
    return model_answer(request, status.HTTP_201_CREATED if created else status.HTTP_200_OK)


@router.get("", response_model=list[Request], summary="List requests, newest first")
def list_requests(
    services: ServicesDep,
    principal: Auth,
    subject: NameFilter = None,
    state: Annotated[list[RequestState] | None, Query()] = None,
    label: Annotated[
        str | None, Query(max_length=2300, description="key=value, applied to the newest `limit` requests")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[Request]:
    own = visible_subject(principal)
    if own is not None and subject is not None and subject != own:
        raise forbidden(f"your token is for subject {own!r}; it cannot list {subject!r}'s requests")
    label_filter = None
    if label is not None:
        key, sep, value = label.partition("=")
        if not sep or not key:
            raise invalid("write the label filter as key=value", "label")
        label_filter = (key, value)
    return requests.list_requests(services.db, subject=own or subject, states=state, label=label_filter, limit=limit)


@router.get("/{request_id}", response_model=Request, summary="Get a request")
def get_request(request_id: str, services: ServicesDep, principal: Auth) -> Response:
    return model_answer(requests.get_request(services.db, principal, request_id))


@router.get(
    "/{request_id}/wait",
    response_model=Request,
    summary="Long-poll until the request's state changes",
    description="Answers as soon as the state differs from `state` (default: the state at the call), or after "
    "`timeout` seconds with the request unchanged; call again to keep waiting.",
)
async def wait_request(
    request_id: str,
    services: ServicesDep,
    principal: Auth,
    state: RequestState | None = None,
    timeout: Annotated[float, Query(ge=0, le=MAX_WAIT_S)] = 30.0,
) -> Response:
    _timeout(services, timeout, "timeout")
    return model_answer(await wait_for_change(services, principal, request_id, state, timeout))


@router.post(
    "/watch",
    response_model=WatchedRequests,
    summary="Long-poll many requests at once (holders of many leases)",
    description=f"`requests` maps each watched request (at most {MAX_BATCH_IDS}) to the state its caller last "
    "saw. Answers as soon as any of them is in another state, listing every one that is (a grant, a preemption "
    "notice, an end), or after `timeout` seconds with none; unknown requests and other subjects' are listed in "
    "`errors` at once. One call per holding process replaces a long-poll per lease; call again with the new "
    "states to keep watching.",
)
async def watch_requests(body: RequestsWatch, services: ServicesDep, principal: Auth) -> Response:
    _timeout(services, body.timeout, "timeout")
    ids = list(body.requests)
    targets = {request_id: state.value for request_id, state in body.requests.items()}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + body.timeout
    watch = _watch(services)
    with watch.watch_many(ids) as changed:  # registered before the read: no change slips by
        changed.targets.update(targets)
        known: dict[str, Request] = {}
        stale: list[str] = ids  # the first read: all of them; then only those said to change
        while True:
            await _refresh(services, watch, known, stale)
            answer = _watched(principal, stale, targets, known)
            remaining = deadline - loop.time()
            if answer.requests or answer.errors or remaining <= 0:
                return model_answer(answer)
            try:
                async with asyncio.timeout(remaining):
                    await changed.wait()
            except TimeoutError:
                return model_answer(answer)
            said = changed.take_changed()  # before the read: news arriving during it wakes us again
            stale = ids if said is None else sorted(said)


async def _refresh(services: Services, watch: RequestWatch, known: dict[str, Request], stale: list[str]) -> None:
    """Bring ``known`` up to date for the ``stale`` requests: a grant handed over with its news is applied
    to the copy read before, anything else is read (one statement for all of them).

    Every request the watch did not hear of is still in the state it was last read in (a lost
    notification is caught by the process's periodic recheck, which marks the request it found
    changed), so a wake costs a read of what changed, not of everything watched: a holder of a thousand
    leases whose one lease is preempted reads one row."""
    unread = []
    for request_id in stale:
        grant = watch.granted(request_id)
        copy = known.get(request_id)
        granted = grant.applied_to(copy) if grant is not None and copy is not None else None
        if granted is not None:
            known[request_id] = granted
        else:
            unread.append(request_id)
    if not unread:
        return
    found = await run_in_threadpool(services.db.read, lambda conn: requests.fetch_many(conn, unread))
    for request_id in unread:
        fresh = found.get(request_id)
        if fresh is None:
            known.pop(request_id, None)
        else:
            known[request_id] = fresh


def _watched(
    principal: Principal, ids: list[str], targets: dict[str, str], found: dict[str, Request]
) -> WatchedRequests:
    answer = WatchedRequests()
    for request_id in ids:
        request = found.get(request_id)
        if request is None:
            error = not_found("request", request_id, "requests")
            answer.errors.append(ItemError(id=request_id, status=error.status, detail=error.detail))
            continue
        own = visible_subject(principal)
        if own is not None and own != request.subject:
            detail = f"request {request_id} belongs to subject {request.subject!r}; your token is for subject {own!r}"
            answer.errors.append(ItemError(id=request_id, status=403, detail=detail))
            continue
        if request.state.value != targets[request_id]:
            answer.requests.append(request)
    return answer


@router.post("/{request_id}/cancel", response_model=Request, summary="Cancel a request (releasing its lease)")
def cancel_request(request_id: str, services: ServicesDep, principal: Auth) -> Request:
    return requests.cancel(services.db, principal, request_id)
