"""The service's stopper: it stops an overdue lease's workload through its backend, then asks the backend
to confirm the stop until it can (a cancelled cloud job takes a while to be terminal), and records the
confirmation; a backend that cannot tell is not asked."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import ClassVar

import pytest

from respools.backends.protocol import Backend, Realization
from respools.model import Form, Host, Lease, PoolSpec, RequestState
from respools.server import backends as server_backends
from respools.server.backends import WorkloadStopper
from respools.server.schemas import StopConfirmation

NOW = datetime(2030, 1, 1, tzinfo=UTC)
LEASE = Lease(
    id="lse_1",
    request_id="req_1",
    subject="team",
    pool="cloud",
    stack="slowcloud",
    resources={"gpu": 1000},
    state=RequestState.PREEMPTING,
    preemptible=True,
    granted_at=NOW,
    expires_at=NOW + timedelta(minutes=1),
    overdue_since=NOW,
)


class SlowCloud(Backend):
    """A stack whose cancelled job turns terminal on the third look."""

    name: ClassVar[str] = "slowcloud"
    forms: ClassVar[frozenset[Form]] = frozenset({Form.WHOLE})

    def __init__(self) -> None:
        self.stopped: list[str] = []
        self.looks = 0

    def discover(self, pool: PoolSpec) -> list[Host]:
        return []

    def realize(self, lease: Lease, pool: PoolSpec) -> Realization:
        return Realization(backend=self.name)

    def stop(self, lease: Lease, pool: PoolSpec) -> None:
        self.stopped.append(lease.id)

    def confirm_stopped(self, lease: Lease, pool: PoolSpec) -> str | None:
        self.looks += 1
        return "job CANCELLED" if self.looks >= 3 else None


class CannotTell(SlowCloud):
    name: ClassVar[str] = "cannottell"
    confirm_stopped = Backend.confirm_stopped


@pytest.mark.parametrize("kind", [SlowCloud, CannotTell])
def test_the_stopper_asks_until_the_backend_confirms(monkeypatch: pytest.MonkeyPatch, kind: type[SlowCloud]) -> None:
    backend = kind()
    monkeypatch.setattr(server_backends, "get_backend", lambda stack: backend)
    monkeypatch.setattr(server_backends, "CONFIRM_EVERY_S", 0.01)
    confirmed: list[tuple[str, StopConfirmation]] = []
    done = threading.Event()

    def confirm(lease_id: str, confirmation: StopConfirmation) -> None:
        confirmed.append((lease_id, confirmation))
        done.set()

    stopper = WorkloadStopper(confirm)
    stopper.stop(LEASE, PoolSpec(name="cloud", stack=kind.name, capacity={"gpu": 1}))
    done.wait(5 if kind is SlowCloud else 0.3)
    stopper.shutdown()

    assert backend.stopped == ["lse_1"]
    if kind is SlowCloud:
        assert backend.looks == 3
        assert [(lease_id, c.backend, c.evidence) for lease_id, c in confirmed] == [
            ("lse_1", "slowcloud", "job CANCELLED")
        ]
    else:
        assert backend.looks == 0 and confirmed == [], "a backend that cannot tell is not asked"
