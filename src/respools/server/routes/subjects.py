"""``/v1/subjects``: who consumes capacity."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from respools.model import Subject
from respools.server.auth import require_owner, visible_subject
from respools.server.ops import subjects
from respools.server.routes.deps import ERRORS, AdminAuth, Auth, ServicesDep

router = APIRouter(prefix="/v1/subjects", tags=["subjects"], responses=ERRORS)


@router.get("", response_model=list[Subject], summary="List subjects (a subject token sees itself)")
def list_subjects(services: ServicesDep, principal: Auth) -> list[Subject]:
    return subjects.list_subjects(services.db, only=visible_subject(principal))


@router.get("/{name}", response_model=Subject, summary="Get a subject")
def get_subject(name: str, services: ServicesDep, principal: Auth) -> Subject:
    require_owner(principal, name, f"subject {name!r}")
    return subjects.get_subject(services.db, name)


@router.put(
    "/{name}",
    response_model=Subject,
    summary="Create or update a subject",
    responses={201: {"model": Subject, "description": "Created"}},
)
def put_subject(name: str, body: Subject, services: ServicesDep, _: AdminAuth, response: Response) -> Subject:
    subject, created = subjects.put_subject(services.db, name, body)
    response.status_code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
    return subject


@router.delete(
    "/{name}",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Delete a subject with its policies, reservations and tokens",
)
def delete_subject(name: str, services: ServicesDep, _: AdminAuth) -> None:
    subjects.delete_subject(services.db, name)
