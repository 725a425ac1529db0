"""``/v1/events``: the event log, paged and as a server-sent event stream."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.sse import EventSourceResponse, ServerSentEvent
from starlette.concurrency import run_in_threadpool

from respools.model import Event, EventKind
from respools.server import events
from respools.server.auth import visible_subject
from respools.server.errors import forbidden, invalid
from respools.server.routes.deps import ERRORS, MAX_CURSOR, Auth, NameFilter, ServicesDep
from respools.server.services import Services

router = APIRouter(prefix="/v1/events", tags=["events"], responses=ERRORS)

STREAM_BATCH = 500
STREAM_POLL_S = 15.0


def _subject_filter(own: str | None, subject: str | None) -> str | None:
    if own is not None and subject is not None and subject != own:
        raise forbidden(f"your token is for subject {own!r}; it cannot read {subject!r}'s events")
    return own or subject


@router.get("", response_model=list[Event], summary="Events after an id, oldest first")
def list_events(
    services: ServicesDep,
    principal: Auth,
    after: Annotated[int, Query(ge=0, le=MAX_CURSOR, description="the last id already seen")] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    kind: Annotated[list[EventKind] | None, Query()] = None,
    pool: NameFilter = None,
    subject: NameFilter = None,
    request_id: NameFilter = None,
    lease_id: NameFilter = None,
) -> list[Event]:
    who = _subject_filter(visible_subject(principal), subject)
    return services.db.read(
        lambda conn: events.read(
            conn,
            after=after,
            limit=limit,
            kinds=kind or (),
            pool=pool,
            subject=who,
            request_id=request_id,
            lease_id=lease_id,
        )
    )


def _page(services: Services, after: int, pool: str | None, subject: str | None) -> list[Event]:
    return services.db.read(lambda conn: events.read(conn, after=after, limit=STREAM_BATCH, pool=pool, subject=subject))


@dataclass(frozen=True, slots=True)
class StreamStart:
    cursor: int
    subject: str | None


async def stream_start(
    services: ServicesDep,
    principal: Auth,
    after: Annotated[int | None, Query(ge=0, le=MAX_CURSOR, description="the last id already seen")] = None,
    subject: NameFilter = None,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
) -> StreamStart:
    """Checked before the stream opens: once it has, an error could no longer be a 4xx."""
    who = _subject_filter(visible_subject(principal), subject)
    if after is None and last_event_id:
        if not last_event_id.isdigit():
            raise invalid("Last-Event-ID must be an event id", "Last-Event-ID")
        after = int(last_event_id)
    cursor = after if after is not None else await run_in_threadpool(services.db.read, events.last_id)
    return StreamStart(cursor, who)


@router.get(
    "/stream",
    response_class=EventSourceResponse,
    summary="Stream events as server-sent events",
    description="Starts after `after` (or the `Last-Event-ID` header a reconnecting browser sends); without "
    "either, with events from now on. Each message has the event's id, its kind as the SSE event name and "
    "the event as JSON data.",
)
async def stream_events(
    request: Request,
    services: ServicesDep,
    start: Annotated[StreamStart, Depends(stream_start)],
    pool: NameFilter = None,
) -> AsyncIterator[ServerSentEvent]:
    cursor = start.cursor
    feed = services.event_feed
    assert feed is not None, "the lifespan attaches the feed"
    while True:
        page = await run_in_threadpool(_page, services, cursor, pool, start.subject)
        for event in page:
            yield ServerSentEvent(data=event.model_dump(mode="json"), event=event.kind.value, id=str(event.id))
            cursor = event.id
        if len(page) == STREAM_BATCH:
            continue
        if await request.is_disconnected():
            return
        await feed.wait(STREAM_POLL_S)
