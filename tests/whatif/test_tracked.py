"""The replay's simulation keeps its snapshot's lists as it goes (``TrackedSimulation``) instead of
filtering every lease and request each cycle: the core must see exactly what the filter would have
given it, the same objects in the same order, through grants, finishes, preemptions, requeues and
steps out of retries."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from random import Random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from respools.definitions.document import load_definitions
from respools.definitions.source import Source
from respools.model import Request
from respools.scheduling import Decisions, schedule
from respools.scheduling.requests import Buckets, bucketed
from respools.simulation import Simulation
from respools.whatif.replay import ReplayOptions, replay
from respools.whatif.synthetic import SyntheticSpec, generate
from respools.whatif.tracked import TrackedSimulation

from ..scheduling.inventory import host
from ..scheduling.sim import policy, pool

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "whatif"
_HOSTS = [host("h0", 4, zone="z1"), host("h1", 4, zone="z2")]


def _layout(buckets: Buckets) -> list[object]:
    return [(known.key, [id(r) for r in members], ids, times) for known, members, ids, times in buckets.values()]


def test_every_snapshot_is_the_one_the_filter_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    """An overloaded half day on today's definitions (reclaims, so preemptions and requeues happen), where
    each cycle first compares the kept lists with ``Simulation.snapshot``'s, and the cycle's decisions
    with those of the filter's snapshot without the kept buckets, books or memory."""
    trace = generate(SyntheticSpec(gpus=1000, jobs=1500, days=0.5, load=1.5, checkpoint_s=600))
    trace = [job.model_copy(update={"max_retries": n % 2}) for n, job in enumerate(trace)]  # some give up
    doc = load_definitions(Source.read(EXAMPLES / "today.yaml"))
    compared: list[int] = []
    step = TrackedSimulation.step

    def checked_step(sim: TrackedSimulation) -> Decisions:
        kept, filtered = sim.snapshot(), Simulation.snapshot(sim)
        assert [lease.id for lease in kept.leases] == [lease.id for lease in filtered.leases]
        assert all(a is b for a, b in zip(kept.leases, filtered.leases, strict=True))
        assert [r.id for r in kept.requests] == [r.id for r in filtered.requests]
        assert all(a is b for a, b in zip(kept.requests, filtered.requests, strict=True))
        assert kept.buckets is not None and filtered.buckets is None
        assert _layout(kept.buckets) == _layout(bucketed(filtered.requests)), "bucketed as the core would"
        assert kept.books is not None and filtered.books is None
        expected = schedule(filtered)  # every lease and request read again, nothing remembered
        compared.append(len(kept.requests))
        decisions = step(sim)
        assert decisions == expected, "the kept buckets and books decide as a fresh read of the lists"
        return decisions

    monkeypatch.setattr(TrackedSimulation, "step", checked_step)
    run = replay(trace, doc.pools, doc.policies, doc.reservations, options=ReplayOptions(cycle_s=60.0))
    assert len(compared) == run.cycles > 100
    assert max(compared) > 50, "the queue grew: requests waited behind others"
    assert sum(lease.preempted for lease in run.leases) > 0, "preempted leases were requeued"
    assert any(job.outcome == "preempted" for job in run.jobs), "a step ran out of retries"


_EVENTS = st.lists(
    st.sampled_from(["submit", "submit", "submit", "submit", "release", "finish", "yield", "tick", "tick"]),
    min_size=20,
    max_size=60,
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_EVENTS, st.randoms(use_true_random=False))
def test_kept_books_decide_as_a_fresh_read_through_deadlines_and_expiries(events: list[str], rnd: Random) -> None:
    """Devices on an inventory, a short grace (holders under notice go overdue, and are revoked once
    their lease expires too) and a short lease lifetime (leases expire): every cycle of the kept
    lists decides as a cycle on the filter's snapshot, with nothing remembered."""
    pools = [pool("p", inventory=_HOSTS, fair_share_preemption=True, preemption_grace_s=1), pool("q", gpu=4)]
    policies = [
        policy("a", "p", reserved={"gpu": 3}),
        policy("b", "p", reserved={"gpu": 2}),
        policy("c", "p", priority=1),
        policy("a", "q", reserved={"gpu": 2}),
        policy("c", "q"),
    ]
    sim = TrackedSimulation(pools=pools, policies=policies, lease_lifetime=timedelta(seconds=6))
    for number, kind in enumerate(events):
        if kind == "submit":
            sim.enqueue(
                Request.model_validate(
                    {
                        "id": f"r{number:03d}",
                        "subject": rnd.choice("abc"),
                        "resources": {"gpu": rnd.choice([0.5, 1, 1, 2, 4])},
                        "preemptible": rnd.random() < 0.7,
                        "priority": rnd.randint(0, 1),
                        "selectors": rnd.choice([{}, {}, {"zone": "z1"}]),
                        "max_retries": 1,
                        "submitted_at": sim.now,
                    }
                )
            )
        elif kind in ("release", "finish") and sim.live():
            lease_id = rnd.choice(sorted(lease.id for lease in sim.live()))
            sim.release(lease_id) if kind == "release" else sim.finished(lease_id)
        elif kind == "yield":
            sim.release_preempting()
        elif kind == "tick":
            sim.now += timedelta(seconds=1)
        expected = schedule(Simulation.snapshot(sim))
        assert sim.step() == expected
