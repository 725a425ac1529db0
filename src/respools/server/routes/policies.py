"""``/v1/policies``: a subject's share of a pool."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from respools.model import Policy, PolicySpec
from respools.server.auth import require_owner, visible_subject
from respools.server.errors import forbidden, invalid
from respools.server.ops import policies
from respools.server.routes.deps import ERRORS, AdminAuth, Auth, NameFilter, ServicesDep

router = APIRouter(prefix="/v1/policies", tags=["policies"], responses=ERRORS)


@router.get("", response_model=list[Policy], summary="List policies (a subject token sees its own)")
def list_policies(
    services: ServicesDep, principal: Auth, pool: NameFilter = None, subject: NameFilter = None
) -> list[Policy]:
    own = visible_subject(principal)
    if own is not None and subject is not None and subject != own:
        raise forbidden(f"your token is for subject {own!r}; it cannot list {subject!r}'s policies")
    return policies.list_policies(services.db, pool=pool, subject=own or subject)


@router.post(
    "",
    response_model=Policy,
    summary="Create or replace a policy",
    description="Keyed by (subject, pool): 201 when created, 200 when replaced.",
    responses={201: {"model": Policy, "description": "Created"}},
)
def post_policy(spec: PolicySpec, services: ServicesDep, _: AdminAuth, response: Response) -> Policy:
    policy, created = policies.put_policy(services.db, spec)
    response.status_code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
    return policy


@router.get("/{pool}/{subject}", response_model=Policy, summary="Get a policy")
def get_policy(pool: str, subject: str, services: ServicesDep, principal: Auth) -> Policy:
    require_owner(principal, subject, f"the policy of subject {subject!r}")
    return policies.get_policy(services.db, pool, subject)


@router.put(
    "/{pool}/{subject}",
    response_model=Policy,
    summary="Create or replace a policy",
    responses={201: {"model": Policy, "description": "Created"}},
)
def put_policy(
    pool: str, subject: str, spec: PolicySpec, services: ServicesDep, _: AdminAuth, response: Response
) -> Policy:
    for field, value, path in (("pool", spec.pool, pool), ("subject", spec.subject, subject)):
        if value != path:
            raise invalid(f"the body's {field} {value!r} differs from the path's {path!r}: make them agree", field)
    policy, created = policies.put_policy(services.db, spec)
    response.status_code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
    return policy


@router.delete("/{pool}/{subject}", status_code=status.HTTP_204_NO_CONTENT, summary="Delete a policy")
def delete_policy(pool: str, subject: str, services: ServicesDep, _: AdminAuth) -> None:
    policies.delete_policy(services.db, pool, subject)
