"""``/v1/tokens`` and ``/v1/whoami``."""

from __future__ import annotations

from fastapi import APIRouter, status

from respools.server.ops import tokens
from respools.server.routes.deps import ERRORS, AdminAuth, Auth, NameFilter, ServicesDep
from respools.server.schemas import IssuedToken, Principal, TokenInfo, TokenSpec

router = APIRouter(prefix="/v1", tags=["tokens"], responses=ERRORS)


@router.get("/whoami", response_model=Principal, summary="The role and subject of the calling token")
def whoami(principal: Auth) -> Principal:
    return principal


@router.get("/tokens", response_model=list[TokenInfo], summary="List tokens (never their secrets)")
def list_tokens(services: ServicesDep, _: AdminAuth, subject: NameFilter = None) -> list[TokenInfo]:
    return tokens.list_tokens(services.db, subject)


@router.post(
    "/tokens",
    response_model=IssuedToken,
    status_code=status.HTTP_201_CREATED,
    summary="Issue a token",
    description="The secret is in this answer only; the server keeps its SHA-256.",
)
def issue_token(spec: TokenSpec, services: ServicesDep, _: AdminAuth) -> IssuedToken:
    return tokens.issue_token(services.db, spec)


@router.delete("/tokens/{token_id}", status_code=status.HTTP_204_NO_CONTENT, summary="Revoke a token")
def revoke_token(token_id: str, services: ServicesDep, _: AdminAuth) -> None:
    tokens.revoke_token(services.db, token_id)
