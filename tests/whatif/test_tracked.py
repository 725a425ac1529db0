"""The replay's simulation keeps its snapshot's lists as it goes (``TrackedSimulation``) instead of
filtering every lease and request each cycle: the core must see exactly what the filter would have
given it, the same objects in the same order, through grants, finishes, preemptions, requeues and
steps out of retries."""

from __future__ import annotations

from pathlib import Path

import pytest

from respools.definitions.document import load_definitions
from respools.definitions.source import Source
from respools.scheduling import Decisions
from respools.scheduling.requests import Buckets, bucketed
from respools.simulation import Simulation
from respools.whatif.replay import ReplayOptions, replay
from respools.whatif.synthetic import SyntheticSpec, generate
from respools.whatif.tracked import TrackedSimulation

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "whatif"


def _layout(buckets: Buckets) -> list[object]:
    return [(known.key, [id(r) for r in members], ids, times) for known, members, ids, times in buckets.values()]


def test_every_snapshot_is_the_one_the_filter_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    """An overloaded half day on today's definitions (reclaims, so preemptions and requeues happen), where
    each cycle first compares the kept lists with ``Simulation.snapshot``'s."""
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
        compared.append(len(kept.requests))
        return step(sim)

    monkeypatch.setattr(TrackedSimulation, "step", checked_step)
    run = replay(trace, doc.pools, doc.policies, doc.reservations, options=ReplayOptions(cycle_s=60.0))
    assert len(compared) == run.cycles > 100
    assert max(compared) > 50, "the queue grew: requests waited behind others"
    assert sum(lease.preempted for lease in run.leases) > 0, "preempted leases were requeued"
    assert any(job.outcome == "preempted" for job in run.jobs), "a step ran out of retries"
