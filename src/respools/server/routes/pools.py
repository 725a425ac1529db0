"""``/v1/pools``: pools, the hosts agents report for them, draining and status."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response, status

from respools.model import Host, Pool, PoolSpec
from respools.server.errors import invalid
from respools.server.ops import hosts, pools
from respools.server.ops.status import pool_statuses
from respools.server.routes.deps import ERRORS, AdminAuth, Auth, ServicesDep
from respools.server.schemas import PoolStatus, RegisteredHost

router = APIRouter(prefix="/v1/pools", tags=["pools"], responses=ERRORS)

PoolName = Annotated[str, Path(description="pool name")]


@router.get("", response_model=list[Pool], summary="List pools")
def list_pools(services: ServicesDep, _: Auth) -> list[Pool]:
    return pools.list_pools(services.db)


@router.post("", response_model=Pool, status_code=status.HTTP_201_CREATED, summary="Create a pool")
def create_pool(spec: PoolSpec, services: ServicesDep, _: AdminAuth) -> Pool:
    pool, _created = pools.put_pool(services.db, spec, create_only=True)
    return pool


@router.get("/{pool}", response_model=Pool, summary="Get a pool as defined")
def get_pool(pool: PoolName, services: ServicesDep, _: Auth) -> Pool:
    return pools.get_pool(services.db, pool)


@router.put(
    "/{pool}",
    response_model=Pool,
    summary="Create or replace a pool",
    description="Idempotent: 201 when created, 200 when replaced. A replacement must still honour the pool's "
    "policies and reservations.",
    responses={201: {"model": Pool, "description": "Created"}},
)
def put_pool(pool: PoolName, spec: PoolSpec, services: ServicesDep, _: AdminAuth, response: Response) -> Pool:
    if spec.name != pool:
        raise invalid(f"the body names pool {spec.name!r} but the path says {pool!r}: make them agree", "name")
    stored, created = pools.put_pool(services.db, spec)
    response.status_code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
    return stored


@router.delete("/{pool}", status_code=status.HTTP_204_NO_CONTENT, summary="Delete a pool")
def delete_pool(pool: PoolName, services: ServicesDep, _: AdminAuth) -> None:
    pools.delete_pool(services.db, pool)


@router.post("/{pool}/drain", response_model=Pool, summary="Stop granting in a pool; live leases run on")
def drain_pool(pool: PoolName, services: ServicesDep, _: AdminAuth) -> Pool:
    return pools.set_draining(services.db, pool, True)


@router.post("/{pool}/resume", response_model=Pool, summary="Grant in a drained pool again")
def resume_pool(pool: PoolName, services: ServicesDep, _: AdminAuth) -> Pool:
    return pools.set_draining(services.db, pool, False)


@router.get("/{pool}/status", response_model=PoolStatus, summary="Capacity, use, borrowing and queue of a pool")
def pool_status(pool: PoolName, services: ServicesDep, _: Auth) -> PoolStatus:
    return pool_statuses(services.db, services.definitions, only=pool)[0]


@router.get("/{pool}/hosts", response_model=list[RegisteredHost], summary="Hosts agents report for a pool")
def list_hosts(pool: PoolName, services: ServicesDep, _: Auth) -> list[RegisteredHost]:
    return hosts.list_hosts(services.db, pool)


@router.put(
    "/{pool}/hosts/{host}",
    response_model=RegisteredHost,
    summary="Register or renew a host's inventory (an agent's heartbeat)",
    description="The report lives `ttl_s` seconds; a host not heard from for that long leaves the pool's "
    "inventory (its leases keep their records) until its next report.",
    responses={201: {"model": RegisteredHost, "description": "Registered"}},
)
def report_host(
    pool: PoolName,
    host: Annotated[str, Path(description="host name")],
    body: Host,
    services: ServicesDep,
    _: AdminAuth,
    response: Response,
    ttl_s: Annotated[float | None, Query(gt=0, le=86400, description="default: the server's host TTL")] = None,
) -> RegisteredHost:
    registered, created = hosts.report_host(
        services.db, pool, host, body, ttl_s if ttl_s is not None else services.settings.host_ttl_s
    )
    response.status_code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
    return registered


@router.delete("/{pool}/hosts/{host}", status_code=status.HTTP_204_NO_CONTENT, summary="Forget a host")
def forget_host(pool: PoolName, host: str, services: ServicesDep, _: AdminAuth) -> None:
    hosts.forget_host(services.db, pool, host)
