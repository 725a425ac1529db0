"""The dashboard's HTTP surface, mounted at ``/`` next to the API (and left out of the OpenAPI document).

- ``GET /``: the dashboard, or the sign-in prompt without a valid session;
- ``POST /ui/login`` / ``POST /ui/logout``: exchange a bearer token for a session cookie, and back;
- ``GET /ui/sections``: the live sections as HTML fragments (what the page fetches on each change);
- ``GET /ui/stream``: server-sent events telling the page that something changed;
- ``POST /ui/leases/{id}/preempt``, ``/ui/requests/{id}/cancel``, ``/ui/pools/{pool}/drain|resume``:
  an admin's actions, through the same operations as the API;
- ``GET /ui/utilization.json``: the utilization charts' series, as data;
- ``GET /usage``: the Usage page (GPU-hours per team over time, preempted work, chargeback table);
- ``GET /ui/usage.csv``: the chargeback table as CSV;
- ``GET /ui/static/{name}``: the stylesheets, the scripts and the icon.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Annotated, Any
from urllib.parse import parse_qs

from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.sse import EventSourceResponse, ServerSentEvent
from starlette.concurrency import run_in_threadpool

from respools.server import usage as usage_ledger
from respools.server.dashboard.access import AdminActionDep, DashboardDep, ViewerDep, current_viewer, same_origin
from respools.server.dashboard.chargeback import charge_rows, chargeback_csv, parse_prices
from respools.server.dashboard.chargeback import window as chargeback_window
from respools.server.dashboard.formatting import as_utc
from respools.server.dashboard.render import STATIC, View, build_view
from respools.server.dashboard.runtime import Dashboard
from respools.server.dashboard.session import COOKIE_NAME
from respools.server.dashboard.settings import DashboardSettings
from respools.server.dashboard.state import Viewer, load_state, load_utilization
from respools.server.dashboard.usage_page import Bucket, build_page, window_ending
from respools.server.errors import ApiError, not_found
from respools.server.ops import leases, pools, requests
from respools.server.schemas import PreemptSpec
from respools.server.services import Services
from respools.server.usage_query import usage_totals

STREAM_WAKE_S = 15.0
"""A stream re-checks its session at least this often, so a revoked token's page stops updating."""
COALESCE_S = 0.05
"""After a change, a stream waits this long so that a burst of commits becomes one refresh."""
MAX_LOGIN_BODY = 8192

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
STATIC_TYPES = {
    "dashboard.css": "text/css",
    "dashboard.js": "text/javascript",
    "usage.js": "text/javascript",
    "favicon.svg": "image/svg+xml",
}


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Runs inside the service's lifespan (FastAPI nests an included router's), once the store is ready."""
    services: Services = app.state.services
    dashboard = await Dashboard.start(services, DashboardSettings.from_env())
    app.state.dashboard = dashboard
    try:
        yield
    finally:
        await dashboard.stop()
        del app.state.dashboard


router = APIRouter(include_in_schema=False, lifespan=lifespan)


def _html(body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(body, status_code=status, headers=SECURITY_HEADERS)


async def _view(dashboard: Dashboard, viewer: Viewer) -> View:
    version = dashboard.feed.version
    settings = dashboard.settings
    state = await run_in_threadpool(
        load_state, dashboard.services, viewer, settings.recent_events, settings.history_window_s
    )
    return build_view(state, viewer, version)


@router.get("/", response_class=HTMLResponse)
async def index(request: Request, dashboard: DashboardDep) -> HTMLResponse:
    viewer = await current_viewer(request, dashboard)
    if viewer is None:
        return _html(dashboard.renderer.login())
    view = await _view(dashboard, viewer)
    return _html(await run_in_threadpool(dashboard.renderer.page, view))


@router.post("/ui/login", response_class=HTMLResponse)
async def login(request: Request, dashboard: DashboardDep) -> Response:
    if not same_origin(request):
        return _html(dashboard.renderer.login("This sign-in came from another site and was refused."), 403)
    if int(request.headers.get("content-length") or 0) > MAX_LOGIN_BODY:
        return _html(dashboard.renderer.login("That is far longer than a token."), 413)
    form = parse_qs((await request.body()).decode("utf-8", "replace"))
    token = (form.get("token") or [""])[0].strip()
    if not token:
        return _html(dashboard.renderer.login("Paste a token to sign in."), 401)
    tokens = dashboard.services.tokens
    principal = tokens.cached(token) or await run_in_threadpool(tokens.lookup, token)
    if principal is None:
        return _html(dashboard.renderer.login("This token is not known (revoked or mistyped)."), 401)
    session = dashboard.sessions.issue(principal.token_id, time.time())
    response = RedirectResponse("/", status_code=303, headers={"Cache-Control": "no-store"})
    response.set_cookie(
        COOKIE_NAME,
        session.value,
        max_age=int(dashboard.sessions.lifetime_s),
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


@router.post("/ui/logout")
async def logout(request: Request) -> Response:
    if not same_origin(request):
        raise ApiError(403, "cross-site request refused")
    response = RedirectResponse("/", status_code=303, headers={"Cache-Control": "no-store"})
    response.delete_cookie(COOKIE_NAME, path="/", httponly=True, samesite="strict")
    return response


@router.get("/ui/sections")
async def sections(dashboard: DashboardDep, viewer: ViewerDep) -> JSONResponse:
    view = await _view(dashboard, viewer)
    rendered = await run_in_threadpool(dashboard.renderer.sections, view)
    body = {
        "now": view.state.now.timestamp() * 1000,
        "version": view.version,
        "sections": rendered,
    }
    return JSONResponse(body, headers={"Cache-Control": "no-store"})


@router.get("/ui/stream", response_class=EventSourceResponse)
async def stream(request: Request, dashboard: DashboardDep, viewer: ViewerDep) -> AsyncIterator[ServerSentEvent]:
    """Tells the page when anything changed; the page then fetches ``/ui/sections``. The stream carries
    no data of its own, so what a viewer may see is decided in one place."""
    feed = dashboard.feed
    with feed.watching():
        seen = feed.version
        yield ServerSentEvent(event="hello", data={"version": seen}, retry=2000)
        while not await request.is_disconnected():
            version = await feed.wait(seen, STREAM_WAKE_S)
            if await current_viewer(request, dashboard) is None:
                yield ServerSentEvent(event="signed-out", data={})
                return
            if version != seen:
                await asyncio.sleep(COALESCE_S)
                seen = feed.version
                yield ServerSentEvent(event="change", data={"version": seen})


def _done(message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"message": message} | extra, headers={"Cache-Control": "no-store"})


@router.post("/ui/leases/{lease_id}/preempt")
async def preempt_lease(lease_id: str, dashboard: DashboardDep, viewer: AdminActionDep) -> JSONResponse:
    services = dashboard.services
    spec = PreemptSpec(message="preempted by an administrator from the dashboard")
    lease = await run_in_threadpool(leases.preempt_lease, services.db, services.definitions, lease_id, spec)
    return _done(f"lease {lease.id} is {lease.state.value}", state=lease.state.value)


@router.post("/ui/requests/{request_id}/cancel")
async def cancel_request(request_id: str, dashboard: DashboardDep, viewer: AdminActionDep) -> JSONResponse:
    request = await run_in_threadpool(requests.cancel, dashboard.services.db, viewer.principal, request_id)
    return _done(f"request {request.id} is {request.state.value}", state=request.state.value)


@router.post("/ui/pools/{pool}/drain")
async def drain_pool(pool: str, dashboard: DashboardDep, viewer: AdminActionDep) -> JSONResponse:
    stored = await run_in_threadpool(pools.set_draining, dashboard.services.db, pool, True)
    return _done(f"pool {stored.name} is draining: no new grants, live leases run on", draining=True)


@router.post("/ui/pools/{pool}/resume")
async def resume_pool(pool: str, dashboard: DashboardDep, viewer: AdminActionDep) -> JSONResponse:
    stored = await run_in_threadpool(pools.set_draining, dashboard.services.db, pool, False)
    return _done(f"pool {stored.name} grants again", draining=False)


@router.get("/ui/usage.csv")
async def usage_csv(
    dashboard: DashboardDep,
    viewer: ViewerDep,
    since: datetime,
    until: datetime | None = None,
    price: Annotated[list[str] | None, Query(max_length=64)] = None,
) -> Response:
    """The chargeback table of the window as CSV (GPU-hours per team and pool, cost where priced)."""
    prices = parse_prices(price or [])
    now = usage_ledger.now_utc()
    end = min(as_utc(until), now) if until is not None else now
    start = as_utc(since)
    chargeback_window(start, end)
    by = [usage_ledger.Dimension.SUBJECT, usage_ledger.Dimension.POOL]
    groups = await run_in_threadpool(
        dashboard.services.db.read,
        lambda conn: usage_totals(conn, start, end, now, viewer.only_subject, by),
    )
    headers = {"Content-Disposition": 'attachment; filename="respools-chargeback.csv"', "Cache-Control": "no-store"}
    return Response(chargeback_csv(charge_rows(groups), prices), media_type="text/csv", headers=headers)


@router.get("/ui/utilization.json")
async def utilization_series(dashboard: DashboardDep, viewer: ViewerDep, until: datetime | None = None) -> JSONResponse:
    """The utilization charts' series (from the usage ledger) over the charts' window ending at ``until``
    (default and at most: now): what the charts draw, as data; the same on every replica."""
    series = await run_in_threadpool(
        load_utilization, dashboard.services, viewer, dashboard.settings.history_window_s, until
    )
    return JSONResponse(series.as_json(), headers={"Cache-Control": "no-store"})


@router.get("/usage", response_class=HTMLResponse)
async def usage_page(
    request: Request,
    dashboard: DashboardDep,
    days: Annotated[int, Query(ge=1, le=400)] = 7,
    bucket: Bucket = Bucket.DAY,
    price: Annotated[list[str] | None, Query(max_length=64)] = None,
) -> HTMLResponse:
    """GPU-hours per team over the last ``days`` (by day or hour), preempted work, and the chargeback
    table with a cost where ``price`` gives one (``POOL=PRICE`` per GPU-hour, repeatable)."""
    viewer = await current_viewer(request, dashboard)
    if viewer is None:
        return _html(dashboard.renderer.login())
    prices = parse_prices(price or [])
    now = usage_ledger.now_utc()
    window = window_ending(now, days, bucket)
    page = await run_in_threadpool(
        dashboard.services.db.read,
        lambda conn: build_page(conn, window, now, viewer.only_subject, prices),
    )
    return _html(await run_in_threadpool(dashboard.renderer.usage_page, viewer, page))


@router.get("/ui/static/{name}")
def static(name: str) -> FileResponse:
    media_type = STATIC_TYPES.get(name)
    if media_type is None:
        raise not_found("file", name)
    return FileResponse(
        STATIC / name,
        media_type=media_type,
        headers={"Cache-Control": "public, max-age=86400, immutable", "X-Content-Type-Options": "nosniff"},
    )
