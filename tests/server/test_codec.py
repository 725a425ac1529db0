"""The fast model construction used on the snapshot path agrees with pydantic's ``model_construct``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from respools.model import Lease, Placement, PlacementItem, Request, RequestState
from respools.server.codec import construct

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def lease_values() -> dict[str, Any]:
    item = {"host": "h", "gpu_uuid": "GPU-1", "gpu_index": 0, "milli": 500, "memory_mb": 40000}
    return {
        "id": "lse_1",
        "request_id": "req_1",
        "subject": "a",
        "pool": "p",
        "stack": "local",
        "resources": {"gpu": 500},
        "borrowed": {},
        "state": RequestState.ACTIVE,
        "preemptible": True,
        "granted_at": NOW,
        "expires_at": NOW,
        "placement": Placement.model_construct(items=[PlacementItem.model_validate(item)]),
    }


def test_construct_matches_model_construct() -> None:
    for cls, values in (
        (Lease, lease_values()),
        (Request, {"id": "req_1", "subject": "a", "resources": {"gpu": 1000}, "submitted_at": NOW}),
        (PlacementItem, {"host": "h", "gpu_uuid": "GPU-1", "gpu_index": 0}),
    ):
        fast = construct(cls, dict(values))
        slow = cls.model_construct(**values)
        assert fast == slow
        assert fast.model_fields_set == slow.model_fields_set
        assert fast.model_dump_json() == slow.model_dump_json()
        assert fast.model_copy(update={"id": "x"} if "id" in values else {}).model_dump() != {}
