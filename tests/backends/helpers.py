"""Builders shared by the backend tests: the devices of the fake hosts, leases, pools."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from respools.model import Host, Lease, Placement, PlacementItem, PoolSpec, RequestState
from tests.backends.fake_nvml import FakeDriver, FakeMig, FakeProcess, a100_80gb_mig, h100_80gb

A100_UUID = "GPU-5a3c8d2e-1f4b-4c6a-9e7d-0b1a2c3d4e5f"
H100_UUID = "GPU-9e8d7c6b-5a4f-4e3d-8c2b-1a0f9e8d7c6b"
MIG_3G = "MIG-7c1e9b2a-3d4f-5a6b-8c9d-0e1f2a3b4c5d"
MIG_2G_A = "MIG-0d2f4b6a-8c1e-4a3b-9d5f-7e0a2c4b6d8f"
MIG_2G_B = "MIG-e1c3a5b7-9d2f-4b4c-8e6a-1f3b5d7c9e0a"
H100_MEMORY_MB = 81559

HOST = "gpu-a"
POOL = "lab"
T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def two_gpu_driver(h100_processes: list[FakeProcess] | None = None, **kwargs: Any) -> FakeDriver:
    """A DGX-like host: an A100-80GB split 3g.40gb + 2 x 2g.20gb, and an H100 80GB without MIG."""
    return FakeDriver(
        [
            a100_80gb_mig(
                A100_UUID,
                [FakeMig(MIG_3G, "3g.40gb"), FakeMig(MIG_2G_A, "2g.20gb"), FakeMig(MIG_2G_B, "2g.20gb")],
            ),
            h100_80gb(H100_UUID, h100_processes),
        ],
        **kwargs,
    )


def whole(uuid: str = H100_UUID, index: int = 1, host: str = HOST) -> PlacementItem:
    return PlacementItem(host=host, gpu_uuid=uuid, gpu_index=index)


def mig(mig_uuid: str, profile: str, host: str = HOST) -> PlacementItem:
    return PlacementItem(host=host, gpu_uuid=A100_UUID, gpu_index=0, mig_uuid=mig_uuid, mig_profile=profile, milli=0)


def fraction(milli: int, memory_mb: int | None = None, uuid: str = H100_UUID, index: int = 1) -> PlacementItem:
    return PlacementItem(host=HOST, gpu_uuid=uuid, gpu_index=index, milli=milli, memory_mb=memory_mb)


def make_lease(*items: PlacementItem, lease_id: str = "lease-1", **fields: Any) -> Lease:
    values: dict[str, Any] = {
        "id": lease_id,
        "request_id": f"req-{lease_id}",
        "subject": "vision",
        "pool": POOL,
        "stack": "local",
        "resources": {"gpu": 1},
        "placement": Placement(items=list(items)),
        "state": RequestState.ACTIVE,
        "preemptible": True,
        "granted_at": T0,
        "expires_at": T0 + timedelta(minutes=1),
    }
    values.update(fields)
    return Lease(**values)


def make_pool(inventory: list[Host] | None = None, **fields: Any) -> PoolSpec:
    return PoolSpec(name=POOL, stack="local", inventory=inventory, **fields)
