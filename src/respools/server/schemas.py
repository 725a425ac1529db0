"""API bodies that only the service speaks (tokens, host reports, pool status, health). The shared
vocabulary — pools, requests, leases, events — lives in :mod:`respools.model`."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from respools.model import (
    Host,
    Name,
    Policy,
    PolicySpec,
    Pool,
    PoolSpec,
    Reservation,
    ReservationSpec,
    ResourceVector,
    Role,
    Subject,
)


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TokenSpec(_Body):
    role: Role
    subject: Name | None = Field(default=None, description="required for role 'subject'")
    description: str | None = Field(default=None, max_length=500)


class TokenInfo(_Body):
    id: str
    role: Role
    subject: str | None = None
    description: str | None = None
    created_at: datetime
    lease_id: str | None = Field(default=None, description="the one lease a lease-scoped token may act on")


class IssuedToken(TokenInfo):
    token: str = Field(description="the bearer secret; shown once, only its hash is stored")


class Principal(_Body):
    """Who a token speaks for (``GET /v1/whoami``)."""

    token_id: str
    role: Role
    subject: str | None = None
    lease_id: str | None = Field(
        default=None,
        description="set for a lease-scoped token: it may read, heartbeat and release this lease only, while held",
    )


class RegisteredHost(_Body):
    """A host as its agent last reported it for a pool."""

    pool: str
    host: Host
    registered_at: datetime
    last_seen_at: datetime
    expires_at: datetime
    live: bool = Field(description="false once the report expired: the host is out of the inventory")


class PoolStatus(_Body):
    name: str
    stack: str
    draining: bool
    capacity: ResourceVector = Field(description="effective capacity (with an inventory: from live hosts)")
    in_use: ResourceVector
    borrowed: ResourceVector
    free: ResourceVector
    live_leases: int
    preempting_leases: int
    overdue_leases: int = Field(
        default=0, description="preempting leases past their grace deadline whose capacity is still held"
    )
    waiting_requests: int = Field(description="pending requests the scheduler last saw waiting on this pool")
    live_hosts: int
    lost_hosts: int


class PreemptSpec(_Body):
    message: str | None = Field(default=None, max_length=500, description="shown to the lease holder")
    grace_s: float | None = Field(default=None, ge=0, description="default: the pool's preemption_grace_s")


class OveruseReport(_Body):
    """An agent's watchdog saw a lease use more of a GPU than it holds (``POST /v1/leases/{id}/overuse``)."""

    lease_id: str
    pool: str
    host: str
    gpu_uuid: str
    pids: list[int] = Field(default_factory=list)
    used_memory_mb: int = Field(ge=0)
    cap_memory_mb: int = Field(ge=0)
    tolerance_mb: int = Field(default=0, ge=0)
    preempt: bool = Field(default=False, description="preempt the lease (reason 'overuse') as well as logging it")
    message: str = Field(max_length=1000)


class StopConfirmation(_Body):
    """A backend saw the workload of a preempting lease stopped (``POST /v1/leases/{id}/stopped``): what
    ends an overdue lease without its holder's release (DESIGN §2.8)."""

    backend: str = Field(
        min_length=1, max_length=63, description="who confirms: the stack's backend or runner ('local', ...)"
    )
    evidence: str = Field(
        min_length=1,
        max_length=1000,
        description="what was checked, for the event log (e.g. 'process group 4242 gone; NVML lists no compute "
        "process of it on GPU-…', 'pods deleted and gone', 'job CANCELLED')",
    )
    host: str | None = Field(default=None, max_length=253, description="where the stop was seen, if one host")


class Health(_Body):
    status: str
    database: bool | None = None
    schema_revision: str | None = None
    reconciler: str | None = Field(default=None, description="leader, follower, disabled or stalled")
    detail: str | None = None


# Definition changes applied together (``POST /v1/definitions/apply``): one op per single-object change
# the API also offers on its own, so a batch means exactly what its calls would, one after the other.


class PutPool(_Body):
    op: Literal["put_pool"]
    spec: PoolSpec


class DeletePool(_Body):
    op: Literal["delete_pool"]
    name: Name


class PutSubject(_Body):
    op: Literal["put_subject"]
    spec: Subject


class DeleteSubject(_Body):
    op: Literal["delete_subject"]
    name: Name


class PutPolicy(_Body):
    op: Literal["put_policy"]
    spec: PolicySpec


class DeletePolicy(_Body):
    op: Literal["delete_policy"]
    pool: Name
    subject: Name


class CreateReservation(_Body):
    op: Literal["create_reservation"]
    spec: ReservationSpec


class DeleteReservation(_Body):
    op: Literal["delete_reservation"]
    id: str = Field(min_length=1, max_length=64)


class IssueToken(_Body):
    op: Literal["issue_token"]
    spec: TokenSpec


class RevokeToken(_Body):
    op: Literal["revoke_token"]
    id: str = Field(min_length=1, max_length=64)


DefinitionChange = Annotated[
    PutPool
    | DeletePool
    | PutSubject
    | DeleteSubject
    | PutPolicy
    | DeletePolicy
    | CreateReservation
    | DeleteReservation
    | IssueToken
    | RevokeToken,
    Field(discriminator="op"),
]


class DefinitionChanges(_Body):
    changes: list[DefinitionChange] = Field(min_length=1, max_length=1000)


class AppliedChange(_Body):
    op: str
    result: Pool | Subject | Policy | Reservation | IssuedToken | None = Field(
        description="the object as stored (an issued token with its secret, shown once); null for a deletion"
    )


class AppliedChanges(_Body):
    results: list[AppliedChange]
