"""Dependencies shared by the routes: the process's services and the caller's identity."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Query, Request
from fastapi.security import HTTPBearer
from starlette.concurrency import run_in_threadpool

from respools.model import ErrorBody
from respools.server.auth import require_admin, unauthenticated
from respools.server.lease_tokens import expired, scope_refusal
from respools.server.schemas import Principal
from respools.server.services import Services

NameFilter = Annotated[str | None, Query(max_length=64, description="only this one")]
"""A name or id to filter a listing by: at most as long as any name or id the service stores."""
MAX_CURSOR = (1 << 63) - 1
"""Event ids are 64-bit: a cursor past the last one possible is refused, not sent to the store."""
MAX_WAIT_S = 86400.0

ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": text}
    for status, text in {
        401: "No token, or a token the server does not know",
        403: "The token's role or subject may not do this",
        404: "No such object",
        409: "Conflicts with the current state",
        422: "Invalid input: `field` names the value at fault",
        503: "The database is unavailable; retry",
    }.items()
}


async def get_services(request: Request) -> Services:
    """``async`` although it awaits nothing: FastAPI runs a plain ``def`` dependency on the thread pool,
    which cost every request a round trip through a worker thread."""
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


class BearerPrincipal(HTTPBearer):
    """The caller's principal, from its bearer token, as one dependency.

    FastAPI solves every dependency of a request in turn, cached or not, each with its own parameter
    matching: reading the token (``HTTPBearer``), then the services, then the principal cost every call
    of the API three of those. This is FastAPI's ``HTTPBearer`` — the OpenAPI document declares the same
    scheme — that goes on to resolve the principal itself."""

    async def __call__(self, request: Request) -> Principal:  # type: ignore[override]
        credentials = await super().__call__(request)
        if credentials is None or not credentials.credentials:
            raise unauthenticated("send a bearer token: 'Authorization: Bearer <token>'")
        token = credentials.credentials
        services = await get_services(request)
        principal = services.tokens.cached(token)
        if principal is None:
            principal = await run_in_threadpool(services.tokens.lookup, token)
        if principal is None:
            raise unauthenticated("this token is not known (revoked or mistyped): ask an admin for a token")
        if principal.lease_id is not None:  # a lease-scoped token: its one lease, while held
            refusal = scope_refusal(principal, request.method, request.url.path)
            refusal = refusal or await run_in_threadpool(expired, services.db, principal)
            if refusal is not None:
                raise refusal
        return principal


authenticate = BearerPrincipal(
    auto_error=False,
    scheme_name=HTTPBearer.__name__,
    description="a token from POST /v1/tokens (or the bootstrap admin token)",
)
Auth = Annotated[Principal, Depends(authenticate)]


async def authenticate_admin(principal: Auth) -> Principal:
    require_admin(principal)
    return principal


AdminAuth = Annotated[Principal, Depends(authenticate_admin)]
