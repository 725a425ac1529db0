"""Several definition changes at once, all or nothing: what ``respools apply`` sends."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from respools.server.ops.apply import apply_changes
from respools.server.routes.deps import ERRORS, AdminAuth, ServicesDep
from respools.server.schemas import AppliedChanges, DefinitionChanges

router = APIRouter(prefix="/v1/definitions", tags=["definitions"], responses=ERRORS)


@router.post(
    "/apply",
    response_model=AppliedChanges,
    summary="Apply definition changes atomically",
    description="Puts and deletes of pools, subjects and policies, reservations created or deleted, tokens "
    "issued or revoked: carried out in order in one transaction, each by the rules of its own endpoint and "
    "seeing the changes before it. A refusal rolls every change back; its `field` names the change "
    "(`changes[2].spec.reserved.gpu`).",
)
async def apply(body: DefinitionChanges, services: ServicesDep, _: AdminAuth) -> AppliedChanges:
    return await run_in_threadpool(apply_changes, services.db, body.changes)
