"""Rows to API models and back.

Rows come from our own store, already validated on the way in, so models are built without
re-validation: the reconciler's snapshot builds thousands of them per cycle. :func:`construct` does what
pydantic's ``model_construct`` does, minus its per-field bookkeeping (which made it the single largest
cost of loading a snapshot); a test checks the two agree.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cache
from typing import Any, TypeVar

from pydantic import BaseModel

from respools.model import (
    Event,
    EventKind,
    Lease,
    Placement,
    PlacementItem,
    Policy,
    PolicySpec,
    Pool,
    PoolSpec,
    PreemptReason,
    Request,
    RequestSpec,
    RequestState,
    Reservation,
    ReservationSpec,
    Subject,
    WaitReason,
)

M = TypeVar("M", bound=BaseModel)
_set = object.__setattr__


_REQUIRED = object()


@cache
def _fields(cls: type[BaseModel]) -> tuple[tuple[str, Any, Callable[[], Any] | None], ...]:
    """Each field in declaration order with its default (``_REQUIRED`` when it has none)."""
    return tuple(
        (name, _REQUIRED if field.is_required() else field.default, field.default_factory)  # type: ignore[misc]
        for name, field in cls.model_fields.items()
    )


def construct(cls: type[M], values: dict[str, Any]) -> M:
    """A model from trusted values, without validation; fields not given take their defaults. Fields are
    laid out in declaration order, as pydantic does, since serialization follows that order."""
    fields: dict[str, Any] = {}
    for name, default, factory in _fields(cls):
        if name in values:
            fields[name] = values[name]
        elif factory is not None:
            fields[name] = factory()
        elif default is not _REQUIRED:
            fields[name] = default
    model = cls.__new__(cls)
    _set(model, "__dict__", fields)
    _set(model, "__pydantic_fields_set__", set(values))
    _set(model, "__pydantic_extra__", None)
    _set(model, "__pydantic_private__", None)
    return model


REQUEST_SPEC_FIELDS = tuple(name for name in RequestSpec.model_fields if name not in {"subject", "idempotency_key"})
"""What the ``spec`` column of a request holds."""


def request_spec_document(spec: RequestSpec) -> dict[str, Any]:
    """The ``spec`` column: what the step asked for, resources in integer units."""
    return {name: getattr(spec, name) for name in REQUEST_SPEC_FIELDS}


def placement_document(placement: Placement) -> dict[str, Any]:
    return {"items": [item.model_dump() for item in placement.items]}


def placement_of(document: Mapping[Any, Any]) -> Placement:
    return construct(Placement, {"items": [construct(PlacementItem, dict(item)) for item in document.get("items", ())]})


WAIT_CLEARED: Mapping[str, None] = {"wait_reason": None, "queue_position": None, "nominated_pool": None}
"""What a request says of its wait in the queue (fields of the model and columns of its row), cleared by
whatever ends or restarts the wait: a grant, a rejection, a cancellation, a requeue. The row also has
``wait_pool`` (not in the model), which those clear with it."""


def request_of(row: Mapping[Any, Any]) -> Request:
    spec = row["spec"]
    wait_reason = row["wait_reason"]
    values = {name: spec[name] for name in REQUEST_SPEC_FIELDS if name in spec}
    values.update(
        id=row["id"],
        subject=row["subject"],
        idempotency_key=row["idempotency_key"],
        state=RequestState(row["state"]),
        submitted_at=row["submitted_at"],
        attempt=row["attempt"],
        reason=row["reason"],
        wait_reason=WaitReason(wait_reason) if wait_reason else None,
        queue_position=row["queue_position"],
        nominated_pool=row["nominated_pool"],
        lease_id=row["lease_id"],
    )
    return construct(Request, values)


def lease_of(row: Mapping[Any, Any]) -> Lease:
    reason = row["preempt_reason"]
    return construct(
        Lease,
        dict(
            id=row["id"],
            request_id=row["request_id"],
            subject=row["subject"],
            pool=row["pool"],
            stack=row["stack"],
            resources=row["resources"],
            borrowed=row["borrowed"],
            placement=placement_of(row["placement"]),
            state=RequestState(row["state"]),
            preemptible=row["preemptible"],
            priority=row["priority"],
            attempt=row["attempt"],
            labels=row["labels"],
            granted_at=row["granted_at"],
            grant_seq=row["grant_seq"],
            started_at=row["started_at"],
            expires_at=row["expires_at"],
            max_runtime_s=row["max_runtime_s"],
            preempt_reason=PreemptReason(reason) if reason else None,
            preempt_deadline=row["preempt_deadline"],
            preempted_for=row["preempted_for"],
            overdue_since=row["overdue_since"],
            released_at=row["released_at"],
            checkpointed_at=row["checkpointed_at"],
            checkpoints=row["checkpoints"],
        ),
    )


def event_of(row: Mapping[Any, Any]) -> Event:
    return construct(
        Event,
        dict(
            id=row["id"],
            at=row["at"],
            kind=EventKind(row["kind"]),
            pool=row["pool"],
            subject=row["subject"],
            request_id=row["request_id"],
            lease_id=row["lease_id"],
            message=row["message"],
            data=row["data"],
        ),
    )


def pool_document(spec: PoolSpec) -> dict[str, Any]:
    """The ``spec`` column of a pool: the definition in wire form (validated again when read)."""
    return spec.model_dump(mode="json", exclude={"created_at", "updated_at"})


def pool_of(row: Mapping[Any, Any]) -> Pool:
    return Pool.model_validate({**row["spec"], "created_at": row["created_at"], "updated_at": row["updated_at"]})


def policy_document(spec: PolicySpec) -> dict[str, Any]:
    return spec.model_dump(mode="json")


def policy_of(row: Mapping[Any, Any]) -> Policy:
    return Policy.model_validate(row["spec"])


def reservation_document(spec: ReservationSpec) -> dict[str, Any]:
    return spec.model_dump(mode="json", exclude={"id"})


def reservation_of(row: Mapping[Any, Any]) -> Reservation:
    return Reservation.model_validate({**row["spec"], "id": row["id"]})


def subject_of(row: Mapping[Any, Any]) -> Subject:
    return Subject(name=row["name"], display_name=row["display_name"], labels=row["labels"])
