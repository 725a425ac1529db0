"""Reservations (DESIGN §2.10): extra reserved share inside a time window."""

from __future__ import annotations

from datetime import timedelta

import pytest

from respools.model import PreemptReason, RequestState, ReservationSpec, WaitReason
from respools.scheduling import DefinitionError, check_reservation

from .sim import T0, Sim, policy, pool


def window(subject: str, start_h: float, end_h: float, gpu: float, pool_name: str = "p") -> ReservationSpec:
    return ReservationSpec.model_validate(
        {
            "subject": subject,
            "pool": pool_name,
            "resources": {"gpu": gpu},
            "start": T0 + timedelta(hours=start_h),
            "end": T0 + timedelta(hours=end_h),
        }
    )


def _sim() -> Sim:
    return Sim(
        [pool("p", gpu=8)],
        [policy("research", "p", reserved={"gpu": 2}), policy("batch", "p", reserved={"gpu": 2})],
        reservations=[window("research", 1, 3, gpu=4)],
    )


def test_inside_the_window_the_reservation_reclaims_borrowed_capacity() -> None:
    sim = _sim()
    for _ in range(8):
        sim.submit("batch", True, gpu=1)
    sim.step()
    assert sim.held("batch") == 8
    sim.now = T0 + timedelta(hours=1, minutes=1)
    rid = sim.submit("research", True, gpu=6)
    d = sim.step()
    assert d.preemptions[0].reason == PreemptReason.RESERVATION
    assert sum(len(p.lease_ids) for p in d.preemptions) == 6
    sim.release_preempting()
    sim.step()
    assert sim.requests[rid].state == RequestState.GRANTED
    assert not sim.lease_of(rid).borrowed, "within policy reserved + reservation: nothing borrowed"


def test_before_the_window_the_reservation_gives_nothing() -> None:
    sim = _sim()
    for _ in range(8):
        sim.submit("batch", True, gpu=1)
    sim.step()
    rid = sim.submit("research", True, gpu=6)
    d = sim.step()
    assert not d.preemptions, "6 GPUs is beyond the policy's 2 reserved: no reclaim before the window"
    assert sim.requests[rid].state == RequestState.PENDING
    within = sim.submit("research", True, gpu=2)
    d = sim.step()
    assert sum(len(p.lease_ids) for p in d.preemptions) == 2
    assert d.preemptions[0].reason == PreemptReason.RECLAIM
    assert within in {p.request_id for p in d.preemptions}


def test_non_preemptible_lease_may_not_outlive_the_window_that_grants_its_share() -> None:
    sim = _sim()
    sim.now = T0 + timedelta(hours=2)
    unbounded = sim.submit("research", False, gpu=6)
    sim.step()
    assert sim.requests[unbounded].wait_reason == WaitReason.RESERVATION_WINDOW
    bounded = sim.submit("research", False, gpu=6, max_runtime_s=1800)
    sim.step()
    assert sim.requests[bounded].state == RequestState.GRANTED


def test_non_preemptible_within_the_policy_share_ignores_windows() -> None:
    sim = _sim()
    rid = sim.submit("research", False, gpu=2)
    sim.step()
    assert sim.requests[rid].state == RequestState.GRANTED


def test_non_preemptible_beyond_every_reservation_is_rejected() -> None:
    sim = _sim()
    rid = sim.submit("research", False, gpu=7)
    sim.step()
    assert "reserved share" in sim.rejected[rid]


def test_oversubscribed_reservation_is_refused_with_the_field() -> None:
    sim = _sim()
    overlapping = window("batch", 2, 4, gpu=1)
    with pytest.raises(DefinitionError) as err:
        check_reservation(overlapping, sim.pools[0], sim.policies, sim.reservations)
    assert err.value.field == "resources.gpu"
    later = window("batch", 3, 4, gpu=4)
    check_reservation(later, sim.pools[0], sim.policies, sim.reservations)
