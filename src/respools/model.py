"""The API contract: pydantic schemas shared by the server, the client and the scheduling core.

Amounts are integers internally so that accounting is exact: GPUs are counted in milli-GPU (``gpu: 0.25``
on the wire is ``250`` in a :data:`ResourceVector`), every other key in its own integer unit. The wire
format shows GPUs as decimals again, so a vector round-trips unchanged.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    field_validator,
    model_validator,
)

# --------------------------------------------------------------------------------------------------
# Resource keys and vectors
# --------------------------------------------------------------------------------------------------

GPU = "gpu"
"""Whole or fractional GPU devices, accounted in milli-GPU."""
GPU_MEMORY_MB = "gpu_memory_mb"
MCPU = "mcpu"
MEMORY_MB = "memory_mb"
STEP_RUN = "step_run"
MIG_PREFIX = "mig."
MILLI = 1000

UNBOUNDED_WHEN_UNMETERED = frozenset({MCPU, MEMORY_MB, STEP_RUN})
"""Keys a pool that does not meter them treats as unbounded (DESIGN §2.1): CPU, memory and step slots
are usually the orchestrator's business, GPUs never are."""

MAX_GPUS = 1_000_000
"""No pool or request holds more GPUs than this (a million: well past any fleet)."""
MAX_AMOUNT = (1 << 53) - 1
"""Every other amount is a whole number JSON carries exactly and a 64-bit column holds."""
MAX_KEYS = 64
MAX_KEY_LENGTH = 100

_KEY_RE = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9][a-z0-9_.-]*)?$")


def is_mig_key(key: str) -> bool:
    return key.startswith(MIG_PREFIX)


def mig_key(profile: str) -> str:
    return f"{MIG_PREFIX}{profile}"


def mig_profile(key: str) -> str:
    return key[len(MIG_PREFIX) :]


def _parse_amount(key: str, value: Any) -> int:
    """One wire amount in internal units."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"amount of {key!r} must be a number, got {value!r}")
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"amount of {key!r} must be a number, got {value!r}") from None
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"amount of {key!r} must be a finite number >= 0, got {value!r}")
    most = MAX_GPUS if key == GPU else MAX_AMOUNT
    if number > most:
        raise ValueError(f"amount of {key!r} must be at most {most:g}, got {value!r}")
    if key == GPU:
        milli = round(number * MILLI)
        if abs(milli - number * MILLI) > 1e-6:
            raise ValueError(f"gpu amounts have a resolution of 0.001, got {value!r}")
        return milli
    if number != int(number):
        raise ValueError(f"amount of {key!r} must be a whole number, got {value!r}")
    return int(number)


class Resources(dict[str, int]):
    """A vector already in internal units (milli-GPU for ``gpu``).

    Validation passes it through unchanged, so code that holds internal amounts (the scheduler's
    decisions, rows read from the store) builds models with ``Resources(vector)``; a plain dict is
    always read as the wire format (``{"gpu": 0.5}``)."""


def _shown(value: Any) -> str:
    """A value for an error message, cut short: an answer never echoes a 10,000-character input."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def parse_resources(raw: Any) -> dict[str, int]:
    """Parse a wire vector (``{"gpu": 0.5, "mcpu": 4000}``) into integer units, rejecting bad keys."""
    if isinstance(raw, Resources):
        return Resources(raw)
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ValueError("resources must be a mapping of resource key to amount")
    if len(raw) > MAX_KEYS:
        raise ValueError(f"at most {MAX_KEYS} resource keys, got {len(raw)}")
    out: dict[str, int] = {}
    for key, value in raw.items():
        if not isinstance(key, str) or len(key) > MAX_KEY_LENGTH or not _KEY_RE.match(key):
            raise ValueError(
                f"invalid resource key {_shown(key)}: use lowercase names of at most {MAX_KEY_LENGTH} characters "
                "such as 'gpu', 'mig.3g.40gb', 'mcpu', 'memory_mb', 'step_run' or a custom key like 'tensorrt_sessions'"
            )
        out[key] = _parse_amount(key, value)  # a zero is kept: ``limit{gpu: 0}`` forbids GPUs (DESIGN §2.1)
    return out


def dump_resources(vector: dict[str, int]) -> dict[str, int | float]:
    return {k: (v / MILLI if k == GPU else v) for k, v in sorted(vector.items())}


def format_resources(vector: dict[str, int]) -> str:
    """Human form for reasons and tables: ``gpu 1.5, mcpu 4000``."""
    return ", ".join(f"{k} {v:g}" for k, v in dump_resources(vector).items()) or "nothing"


ResourceVector = Annotated[
    dict[str, int],
    BeforeValidator(parse_resources),
    PlainSerializer(dump_resources, return_type=dict[str, int | float]),
]
"""A vector of resource amounts in integer units (milli-GPU for ``gpu``)."""


# --------------------------------------------------------------------------------------------------
# Enumerations
# --------------------------------------------------------------------------------------------------


class Form(StrEnum):
    """The ways a stack can hand out GPUs; a pool's backend declares which it can express."""

    WHOLE = "whole"
    MIG = "mig"
    FRACTION = "fraction"


class RequestState(StrEnum):
    PENDING = "pending"
    GRANTED = "granted"
    ACTIVE = "active"
    PREEMPTING = "preempting"
    PREEMPTED = "preempted"
    RELEASED = "released"
    REJECTED = "rejected"
    CANCELLED = "cancelled"
    EXPIRED = "expired"


LIVE_LEASE_STATES = frozenset({RequestState.GRANTED, RequestState.ACTIVE, RequestState.PREEMPTING})
TERMINAL_STATES = frozenset(
    {
        RequestState.RELEASED,
        RequestState.REJECTED,
        RequestState.CANCELLED,
        RequestState.EXPIRED,
        RequestState.PREEMPTED,
    }
)


class WaitReason(StrEnum):
    """Why a request is still queued; shown to the data scientist whose step waits."""

    NO_CAPACITY = "no_capacity"
    FRAGMENTED = "fragmented"
    LIMIT = "limit"
    RESERVED_SHARE = "reserved_share"
    STEP_RUN_SLOTS = "step_run_slots"
    HELD_FOR_PREEMPTOR = "held_for_preemptor"
    PREEMPTING = "preempting"
    RESERVATION_WINDOW = "reservation_window"
    POOL_DRAINING = "pool_draining"


class PreemptReason(StrEnum):
    PRIORITY = "priority"
    RECLAIM = "reclaim"
    FAIR_SHARE = "fair_share"
    RESERVATION = "reservation"
    OVERUSE = "overuse"
    ADMIN = "admin"


class Role(StrEnum):
    ADMIN = "admin"
    SUBJECT = "subject"
    VIEWER = "viewer"


class EventKind(StrEnum):
    SUBMITTED = "submitted"
    GRANTED = "granted"
    REJECTED = "rejected"
    PREEMPTING = "preempting"
    PREEMPTED = "preempted"
    REQUEUED = "requeued"
    RELEASED = "released"
    EXPIRED = "expired"
    CANCELLED = "cancelled"
    OVERUSE = "overuse"
    HOST_LOST = "host_lost"
    OVERDUE = "overdue"


# --------------------------------------------------------------------------------------------------
# Pools and inventory
# --------------------------------------------------------------------------------------------------

_NAME_RE = r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$"
Name = Annotated[str, Field(pattern=_NAME_RE, description="lowercase letters, digits, '.', '_' or '-'")]

# Bounds every field of the API shares (the same hold in `respools apply` files, whose fields are these).
# Text the store cannot hold (U+0000) is refused before any schema sees it (``server/input_guard.py``).
MAX_PRIORITY = 1_000_000_000
"""Priorities are compared, never summed: a billion levels either way is more than any policy needs,
and keeps them in a 32-bit column."""
MAX_SECONDS = 366 * 86400.0
"""The longest duration any field takes (a runtime, a window): a year."""
ShortText = Annotated[str, Field(min_length=1, max_length=200)]
"""Identifiers others chose: GPU UUIDs, model names, MIG profiles, GPU classes."""
Note = Annotated[str, Field(max_length=1000)]
LabelKey = Annotated[str, Field(min_length=1, max_length=253)]
LabelValue = Annotated[str, Field(max_length=2048)]
Labels = Annotated[dict[LabelKey, LabelValue], Field(max_length=64, description="at most 64 entries")]
Priority = Annotated[int, Field(ge=-MAX_PRIORITY, le=MAX_PRIORITY)]
PositiveSeconds = Annotated[float, Field(gt=0, le=MAX_SECONDS)]


class _Schema(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=False, frozen=False)


class MigInstance(_Schema):
    uuid: ShortText
    profile: ShortText = Field(description="MIG profile name, e.g. '3g.40gb'")


class Gpu(_Schema):
    uuid: ShortText
    index: int = Field(ge=0, le=1023)
    model: ShortText = Field(description="product name as the driver reports it")
    memory_mb: int = Field(gt=0, le=1 << 30)
    mig_enabled: bool = False
    mig_instances: list[MigInstance] = Field(default_factory=list, max_length=64)
    attributes: Labels = Field(default_factory=dict)

    @model_validator(mode="after")
    def _mig_instances_need_mig_mode(self) -> Gpu:
        if self.mig_instances and not self.mig_enabled:
            raise ValueError(f"gpu {self.uuid}: mig_instances given but mig_enabled is false")
        return self


class Host(_Schema):
    name: Name
    gpus: list[Gpu] = Field(default_factory=list, max_length=64)
    labels: Labels = Field(default_factory=dict)


class PoolSpec(_Schema):
    """A pool as a platform team defines it."""

    name: Name
    stack: str = Field(
        default="local", pattern=_NAME_RE, description="backend name (entry point in 'respools.backends')"
    )
    capacity: ResourceVector = Field(
        default_factory=dict,
        description="metered keys; with an inventory, gpu and mig.* are derived from it",
    )
    inventory: list[Host] | None = Field(default=None, max_length=10_000)
    forms: list[Form] | None = Field(
        default=None, description="forms this pool hands out; default: all its backend can express"
    )
    gpu_class: ShortText | None = Field(default=None, description="GPU class of a pool without inventory")
    settings: dict[str, Any] = Field(default_factory=dict, max_length=64, description="backend-specific settings")
    preemption_grace_s: float = Field(default=60.0, ge=0, le=86400)
    fair_share_preemption: bool = False
    lease_ttl_s: float = Field(default=60.0, gt=0, le=86400)
    init_timeout_s: float = Field(default=600.0, gt=0, le=7 * 86400)
    draining: bool = False
    labels: Labels = Field(default_factory=dict)

    @model_validator(mode="after")
    def _inventory_is_consistent(self) -> PoolSpec:
        if self.inventory is None:
            return self
        seen_hosts: set[str] = set()
        seen_uuids: set[str] = set()
        for host in self.inventory:
            if host.name in seen_hosts:
                raise ValueError(f"inventory: host {host.name!r} listed twice")
            seen_hosts.add(host.name)
            for gpu in host.gpus:
                uuids = [gpu.uuid, *(m.uuid for m in gpu.mig_instances)]
                for uuid in uuids:
                    if uuid in seen_uuids:
                        raise ValueError(f"inventory: uuid {uuid!r} listed twice")
                    seen_uuids.add(uuid)
        for key in self.capacity:
            if key == GPU or is_mig_key(key):
                raise ValueError(
                    f"capacity.{key}: a pool with an inventory derives {key!r} from it; remove the key or the inventory"
                )
        return self


class Pool(PoolSpec):
    """A pool as stored: the spec plus when it was last changed."""

    created_at: datetime | None = None
    updated_at: datetime | None = None


# --------------------------------------------------------------------------------------------------
# Subjects, policies, reservations
# --------------------------------------------------------------------------------------------------


class Subject(_Schema):
    name: Name
    display_name: str | None = Field(default=None, max_length=200)
    labels: Labels = Field(default_factory=dict)


class PolicySpec(_Schema):
    subject: Name
    pool: Name
    reserved: ResourceVector = Field(default_factory=dict)
    limit: ResourceVector | None = Field(default=None, description="absent = the pool's total")
    priority: Priority = 0
    weight: float = Field(default=1.0, ge=0, le=1_000_000)

    @model_validator(mode="after")
    def _reserved_within_limit(self) -> PolicySpec:
        if self.limit is None:
            return self
        for key, amount in self.reserved.items():
            cap = self.limit.get(key)
            if cap is not None and amount > cap:
                raise ValueError(
                    f"reserved.{key} ({format_resources({key: amount})}) exceeds limit.{key} "
                    f"({format_resources({key: cap})}): lower the reservation or raise the limit"
                )
        return self


class Policy(PolicySpec):
    pass


class ReservationSpec(_Schema):
    subject: Name
    pool: Name
    resources: ResourceVector
    start: datetime
    end: datetime
    note: Note | None = None

    @model_validator(mode="after")
    def _window_is_ordered(self) -> ReservationSpec:
        if self.end <= self.start:
            raise ValueError("end must be after start")
        if not self.resources:
            raise ValueError("resources: a reservation must reserve at least one key")
        return self


class Reservation(ReservationSpec):
    id: str


# --------------------------------------------------------------------------------------------------
# Requests and leases
# --------------------------------------------------------------------------------------------------


class RequestSpec(_Schema):
    """What a step asks for."""

    subject: Name | None = Field(default=None, description="defaults to the token's subject")
    resources: ResourceVector
    replicas: int = Field(default=1, ge=1, le=1024, description="gang size: hosts, all or nothing")
    preemptible: bool = False
    priority: Priority = Field(default=0, description="request priority within the subject")
    pools: list[Name] | None = Field(default=None, max_length=64, description="candidate pools; default: all policies")
    gpu_class: ShortText | None = None
    selectors: Labels = Field(default_factory=dict, description="host labels / GPU attributes")
    labels: Labels = Field(default_factory=dict, description="pipeline, run, step, user…")
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=200)
    max_retries: int = Field(default=0, ge=0, le=100)
    max_runtime_s: PositiveSeconds | None = None

    @field_validator("resources")
    @classmethod
    def _asks_for_something(cls, value: dict[str, int]) -> dict[str, int]:
        if not value:
            raise ValueError("ask for at least one resource, e.g. {'gpu': 1}")
        # Every request is one concurrently running step: pools that meter step_run count it.
        return {STEP_RUN: 1, **value}


class Request(RequestSpec):
    id: str
    subject: Name
    state: RequestState = RequestState.PENDING
    submitted_at: datetime
    attempt: int = 0
    reason: str | None = None
    wait_reason: WaitReason | None = None
    queue_position: int | None = None
    nominated_pool: str | None = Field(default=None, description="pool where preemption runs for it")
    lease_id: str | None = None


class PlacementItem(_Schema):
    """One device (or slice of one) that a lease holds."""

    host: str
    gpu_uuid: str
    gpu_index: int
    mig_uuid: str | None = None
    mig_profile: str | None = None
    milli: int = Field(default=MILLI, description="share of the GPU in milli-GPU (1000 = whole)")
    memory_mb: int | None = Field(default=None, description="memory cap for fractions")


class Placement(_Schema):
    items: list[PlacementItem] = Field(default_factory=list)

    @property
    def hosts(self) -> list[str]:
        return sorted({i.host for i in self.items})


class Lease(_Schema):
    id: str
    request_id: str
    subject: str
    pool: str
    stack: str
    resources: ResourceVector
    borrowed: ResourceVector = Field(default_factory=dict)
    placement: Placement = Field(default_factory=Placement)
    state: RequestState
    preemptible: bool
    priority: int = 0
    attempt: int = 0
    labels: dict[str, str] = Field(default_factory=dict)
    granted_at: datetime
    grant_seq: int = Field(default=0, ge=0)
    """The grant's place among those of its cycle: with ``granted_at`` a total order of grants, which
    "most recently granted" follows (DESIGN §2.5) where one cycle's grants share their time."""
    started_at: datetime | None = None
    expires_at: datetime
    max_runtime_s: float | None = None
    preempt_reason: PreemptReason | None = None
    preempt_deadline: datetime | None = None
    preempted_for: str | None = None
    overdue_since: datetime | None = Field(
        default=None,
        description="set when a preempting lease passed its grace deadline unreleased: it keeps its capacity "
        "until its holder releases it, its backend confirms the workload stopped, or its holder is silent "
        "for a full TTL",
    )
    released_at: datetime | None = None
    checkpointed_at: datetime | None = Field(
        default=None,
        description="when its holder last reported a checkpoint (server time); what a preemption loses is "
        "the work since then",
    )
    checkpoints: int = Field(default=0, ge=0, description="checkpoints its holder reported")


class Event(_Schema):
    id: int
    at: datetime
    kind: EventKind
    pool: str | None = None
    subject: str | None = None
    request_id: str | None = None
    lease_id: str | None = None
    message: str
    data: dict[str, Any] = Field(default_factory=dict)


class ErrorBody(_Schema):
    """Every 4xx answer: what went wrong and, where one field is at fault, which."""

    detail: str
    field: str | None = None


TokenRole = Literal["admin", "subject", "viewer"]


# -- holders of many leases ------------------------------------------------------------------------------

MAX_BATCH_IDS = 1000
"""Leases per batch heartbeat and requests per watch call, at most."""
ObjectId = Annotated[str, Field(min_length=1, max_length=100)]


class LeaseHeartbeats(_Schema):
    """``POST /v1/leases/heartbeat``: renew many leases in one call."""

    lease_ids: list[ObjectId] = Field(min_length=1, max_length=MAX_BATCH_IDS, description="at most 1000")


class ItemError(_Schema):
    """Why one item of a batch was refused: the status and message its single-item call would answer."""

    id: str
    status: int
    detail: str


class HeartbeatOutcomes(_Schema):
    """Each renewed lease as its own heartbeat would answer it, and each refused one's error."""

    leases: list[Lease] = Field(default_factory=list)
    errors: list[ItemError] = Field(default_factory=list)


class RequestsWatch(_Schema):
    """``POST /v1/requests/watch``: a long-poll on many requests, each with the state its caller saw."""

    requests: dict[ObjectId, RequestState] = Field(
        min_length=1, max_length=MAX_BATCH_IDS, description="request id → the state to wait for it to leave"
    )
    timeout: float = Field(default=30.0, ge=0, le=86400.0, description="seconds to wait for a change")


class WatchedRequests(_Schema):
    """The watched requests whose state differs from the one given (none after a timeout), and the
    unknown or forbidden ones."""

    requests: list[Request] = Field(default_factory=list)
    errors: list[ItemError] = Field(default_factory=list)
