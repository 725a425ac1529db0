"""``/v1/leases``: read, heartbeat, checkpoint, release, preempt."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Query, Response, status

from respools.model import MAX_BATCH_IDS, HeartbeatOutcomes, Lease, LeaseHeartbeats, RequestState
from respools.server.auth import require_writer, visible_subject
from respools.server.errors import forbidden
from respools.server.ops import leases, tokens
from respools.server.routes.answers import model_answer
from respools.server.routes.deps import ERRORS, AdminAuth, Auth, NameFilter, ServicesDep
from respools.server.schemas import IssuedToken, OveruseReport, PreemptSpec, StopConfirmation

router = APIRouter(prefix="/v1/leases", tags=["leases"], responses=ERRORS)


@router.get("", response_model=list[Lease], summary="List leases, newest first")
def list_leases(
    services: ServicesDep,
    principal: Auth,
    subject: NameFilter = None,
    pool: NameFilter = None,
    state: Annotated[list[RequestState] | None, Query()] = None,
    live: Annotated[bool, Query(description="only granted, active or preempting leases")] = False,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[Lease]:
    own = visible_subject(principal)
    if own is not None and subject is not None and subject != own:
        raise forbidden(f"your token is for subject {own!r}; it cannot list {subject!r}'s leases")
    states = state
    if live:
        states = [RequestState.GRANTED, RequestState.ACTIVE, RequestState.PREEMPTING]
    return leases.list_leases(services.db, subject=own or subject, pool=pool, states=states, limit=limit)


@router.post(
    "/heartbeat",
    response_model=HeartbeatOutcomes,
    summary="Renew many leases in one call (holders of many leases)",
    description=f"Each of `lease_ids` (at most {MAX_BATCH_IDS}) is renewed as its own heartbeat would renew it; "
    "`leases` lists the renewed ones (each one's `state` is `preempting` once it got notice) and `errors` the "
    "refused ones, each with the status its own heartbeat would answer (404 unknown, 403 another subject's, "
    "409 ended). Renew every lease at least every third of its pool's TTL, as with the single heartbeat.",
)
async def heartbeat_many(body: LeaseHeartbeats, services: ServicesDep, principal: Auth) -> Response:
    return model_answer(await services.renewals.renew_many(principal, body.lease_ids))


@router.get("/{lease_id}", response_model=Lease, summary="Get a lease")
def get_lease(lease_id: str, services: ServicesDep, principal: Auth) -> Lease:
    return leases.get_lease(services.db, principal, lease_id)


@router.post(
    "/{lease_id}/heartbeat",
    response_model=Lease,
    summary="Renew a lease (the first heartbeat marks it active)",
    description="The answer's `state` is `preempting` once the lease got notice; `preempt_deadline` says when "
    "it will be revoked. 409 when the lease has ended.",
)
async def heartbeat(lease_id: str, services: ServicesDep, principal: Auth) -> Response:
    renewed = await services.renewals.renew(principal, lease_id)
    if renewed is None:  # to be written before it is answered (see respools.server.renewals)
        renewed = await leases.heartbeat(services.writes, services.definitions, principal, lease_id)
    return model_answer(renewed)


@router.post(
    "/{lease_id}/checkpoint",
    response_model=Lease,
    summary="Report that the holder took a checkpoint",
    description="Sets the lease's `checkpointed_at` to the server's time and counts it in `checkpoints`. If "
    "the lease is later preempted, the usage ledger counts only the time since the last checkpoint as lost "
    "work (`lost` in `GET /v1/usage`). No event is logged per checkpoint. 409 when the lease has ended.",
)
def checkpoint(lease_id: str, services: ServicesDep, principal: Auth) -> Lease:
    return leases.checkpoint_lease(services.db, principal, lease_id)


@router.post(
    "/{lease_id}/release",
    response_model=Lease,
    summary="Release a lease",
    description="Releasing a preempting lease completes the preemption and requeues the request while retries "
    "remain. Releasing an ended lease changes nothing.",
)
async def release(lease_id: str, services: ServicesDep, principal: Auth) -> Response:
    return model_answer(await leases.release_lease(services.writes, principal, lease_id))


@router.post(
    "/{lease_id}/token",
    response_model=IssuedToken,
    status_code=status.HTTP_201_CREATED,
    summary="Issue a token scoped to this lease (its subject or an admin)",
    description="The token may read, heartbeat and release this lease only, and ends with it (401 once the "
    "lease is no longer held; 403 for any other call). Runners put it in the job's environment as "
    "`RESPOOLS_TOKEN`. 409 when the lease is not held.",
)
def lease_token(lease_id: str, services: ServicesDep, principal: Auth) -> IssuedToken:
    require_writer(principal)
    return tokens.issue_lease_token(services.db, principal, lease_id)


@router.post("/{lease_id}/preempt", response_model=Lease, summary="Preempt a lease (admin)")
def preempt(
    lease_id: str, services: ServicesDep, _: AdminAuth, spec: Annotated[PreemptSpec | None, Body()] = None
) -> Lease:
    return leases.preempt_lease(services.db, services.definitions, lease_id, spec or PreemptSpec())


@router.post(
    "/{lease_id}/overuse",
    response_model=Lease,
    summary="Report over-use of a lease's GPU share (agents, admin token)",
    description="Logged as an `overuse` event; with `preempt` the lease also gets preemption notice.",
)
def overuse(lease_id: str, report: OveruseReport, services: ServicesDep, _: AdminAuth) -> Lease:
    return leases.report_overuse(services.db, services.definitions, lease_id, report)


@router.post(
    "/{lease_id}/stopped",
    response_model=Lease,
    summary="Confirm that a preempting lease's workload stopped (backends and agents, admin token)",
    description="Past its grace deadline a preempting lease is overdue and keeps its capacity until its holder "
    "releases it, a backend confirms here that its workload is gone (local: process group gone and no NVML "
    "compute process on its devices; Kubernetes: pods deleted and gone; Vertex AI / Databricks: job terminal), "
    "or its holder is silent for a full TTL. Confirming ends the lease as a release would (requeue while "
    "retries remain). 409 for a lease that is not preempting; an ended lease is answered as it is.",
)
def stopped(lease_id: str, confirmation: StopConfirmation, services: ServicesDep, _: AdminAuth) -> Lease:
    return leases.confirm_stop(services.db, lease_id, confirmation)
