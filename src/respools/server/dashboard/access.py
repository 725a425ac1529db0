"""Who is looking: the session behind a request, and the checks in front of every write.

Reads need a valid session; writes (an admin's preempt, cancel, drain) also need the page's CSRF token
in ``X-CSRF-Token`` and a same-origin request — ``SameSite=Strict`` already keeps the cookie off
cross-site requests, the token and the origin check hold even where a browser or proxy does not."""

from __future__ import annotations

import hmac
import time
from typing import Annotated
from urllib.parse import urlsplit

from fastapi import Depends, Header, Request

from respools.server.auth import require_admin, unauthenticated
from respools.server.dashboard.runtime import Dashboard
from respools.server.dashboard.session import COOKIE_NAME
from respools.server.dashboard.state import Viewer
from respools.server.errors import ApiError, forbidden

CSRF_HEADER = "X-CSRF-Token"


async def dashboard_of(request: Request) -> Dashboard:  # async: FastAPI runs a def dependency on a thread
    dashboard: Dashboard | None = getattr(request.app.state, "dashboard", None)
    if dashboard is None:
        raise ApiError(503, "the dashboard is starting; try again in a moment")
    return dashboard


DashboardDep = Annotated[Dashboard, Depends(dashboard_of)]


def same_origin(request: Request) -> bool:
    """False when the browser says the request comes from another site (``Sec-Fetch-Site``, or else
    ``Origin``); a client that is no browser sends neither and cannot carry a victim's cookie anyway."""
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return site in {"same-origin", "none"}
    origin = request.headers.get("origin")
    if origin is None:
        return True
    return urlsplit(origin).netloc == request.headers.get("host")


async def current_viewer(request: Request, dashboard: DashboardDep) -> Viewer | None:
    """The signed-in viewer, or ``None`` without a valid session (or once its token was revoked)."""
    session = dashboard.sessions.verify(request.cookies.get(COOKIE_NAME), time.time())
    if session is None:
        return None
    principal = await dashboard.principals.resolve(session.token_id)
    if principal is None:
        return None
    return Viewer(principal, dashboard.sessions.csrf_token(session))


async def require_viewer(viewer: Annotated[Viewer | None, Depends(current_viewer)]) -> Viewer:
    if viewer is None:
        raise unauthenticated("sign in at / with a respools token")
    return viewer


ViewerDep = Annotated[Viewer, Depends(require_viewer)]


async def require_admin_action(
    request: Request,
    viewer: ViewerDep,
    csrf_token: Annotated[str | None, Header(alias=CSRF_HEADER)] = None,
) -> Viewer:
    if not same_origin(request):
        raise forbidden("cross-site request refused")
    if csrf_token is None or not hmac.compare_digest(csrf_token, viewer.csrf):
        raise forbidden(f"missing or stale {CSRF_HEADER}: reload the page")
    require_admin(viewer.principal)
    return viewer


AdminActionDep = Annotated[Viewer, Depends(require_admin_action)]
