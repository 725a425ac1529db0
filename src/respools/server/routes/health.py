"""Liveness, readiness and metrics — unauthenticated, for load balancers and Prometheus."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool

from respools.server.routes.deps import ServicesDep
from respools.server.schemas import Health
from respools.server.services import Services

router = APIRouter(tags=["operations"])


@router.get("/healthz", response_model=Health, response_model_exclude_none=True, summary="The process is alive")
def healthz() -> Health:
    return Health(status="ok")


def _readiness(services: Services) -> Health:
    if not services.db.ping():
        return Health(status="unavailable", database=False, detail="the database does not answer")
    revision = services.schema_revision()
    expected = services.expected_revision()
    role = services.reconciler.role.value
    if revision != expected:
        return Health(
            status="unavailable",
            database=True,
            schema_revision=revision,
            reconciler=role,
            detail=f"schema is at {revision}, this version needs {expected}",
        )
    if not services.started:
        return Health(status="unavailable", database=True, schema_revision=revision, reconciler=role, detail="starting")
    if not services.reconciler.healthy():
        return Health(
            status="unavailable",
            database=True,
            schema_revision=revision,
            reconciler="stalled",
            detail="this replica leads but its reconciler has not completed a cycle lately",
        )
    return Health(status="ok", database=True, schema_revision=revision, reconciler=role)


@router.get(
    "/readyz",
    response_model=Health,
    summary="Ready to serve: database reachable, schema current, reconciler healthy",
    responses={503: {"model": Health, "description": "Not ready"}},
)
async def readyz(services: ServicesDep) -> Response:
    health = await run_in_threadpool(_readiness, services)
    return JSONResponse(
        health.model_dump(mode="json", exclude_none=True), status_code=200 if health.status == "ok" else 503
    )


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
async def metrics(services: ServicesDep) -> Response:
    body = await run_in_threadpool(generate_latest, services.metrics.registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
