"""``/v1/requests``: submit, read, long-poll, cancel."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Annotated

from fastapi import APIRouter, Header, Query, Response, status
from starlette.concurrency import run_in_threadpool

from respools.model import Request, RequestSpec, RequestState
from respools.server.auth import visible_subject
from respools.server.errors import forbidden, invalid, not_found
from respools.server.ops import requests
from respools.server.routes.answers import model_answer
from respools.server.routes.deps import ERRORS, MAX_WAIT_S, Auth, NameFilter, ServicesDep
from respools.server.schemas import Principal
from respools.server.services import Services
from respools.server.watchers import RequestWatch

router = APIRouter(prefix="/v1/requests", tags=["requests"], responses=ERRORS)

RECHECK_S = 5.0
"""Long-polls re-read their request at least this often, in case a notification was lost."""


def _timeout(services: Services, timeout: float, field: str) -> float:
    if timeout > services.settings.max_wait_s:
        raise invalid(f"wait at most {services.settings.max_wait_s:g} seconds per call, then call again", field)
    return timeout


def _watch(services: Services) -> RequestWatch:
    watch = services.request_watch
    assert watch is not None, "the lifespan attaches the watch"
    return watch


async def _until_changed(
    services: Services, changed: asyncio.Event, request: Request, target: RequestState, timeout: float
) -> Request:
    """Re-read ``request`` whenever it is said to have changed, until its state leaves ``target`` or
    ``timeout`` passes. The caller registered ``changed`` before its first read.

    A grant of the pending request (by any replica's reconciler) is answered from the grant, without
    reading the store again."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    request_id = request.id
    watch = _watch(services)
    while request.state == target:
        remaining = deadline - loop.time()
        if remaining <= 0:
            break
        grant = None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(min(remaining, RECHECK_S)):  # no task per wait, unlike wait_for
                await changed.wait()
            grant = watch.granted(request_id)
        changed.clear()
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
        request = await run_in_threadpool(requests.get_request, services.db, principal, request_id)
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


@router.post("/{request_id}/cancel", response_model=Request, summary="Cancel a request (releasing its lease)")
def cancel_request(request_id: str, services: ServicesDep, principal: Auth) -> Request:
    return requests.cancel(services.db, principal, request_id)
