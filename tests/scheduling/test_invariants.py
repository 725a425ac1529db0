"""Property tests of the scheduling invariants over random pools, policies and event sequences."""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from respools.model import MILLI, Lease, PreemptReason, RequestState
from respools.scheduling import Decisions, Snapshot, pool_capacity, schedule

from .inventory import host
from .sim import Sim, as_seen, play, policy, pool

SUBJECTS = ["a", "b", "c", "d"]


@st.composite
def worlds(draw: st.DrawFn) -> Sim:
    with_inventory = draw(st.booleans())
    if with_inventory:
        hosts = [host(f"h{i}", draw(st.integers(1, 4))) for i in range(draw(st.integers(1, 3)))]
        p = pool("p", inventory=hosts, fair_share_preemption=draw(st.booleans()))
    else:
        p = pool(
            "p",
            gpu=draw(st.integers(1, 16)),
            mcpu=draw(st.sampled_from([0, 8000, 32000])) or 0,
            fair_share_preemption=draw(st.booleans()),
        )
    capacity = pool_capacity(p)
    left = capacity.get("gpu", 0) // MILLI
    policies = []
    for subject in SUBJECTS[: draw(st.integers(1, 4))]:
        reserved = draw(st.integers(0, left))
        left -= reserved
        limit = draw(st.one_of(st.none(), st.integers(max(reserved, 1), 16)))
        policies.append(
            policy(
                subject,
                "p",
                priority=draw(st.integers(0, 2)),
                reserved={"gpu": reserved} if reserved else {},
                limit={"gpu": limit} if limit is not None else None,
                weight=draw(st.sampled_from([0.0, 1.0, 2.0, 4.0])),
            )
        )
    return Sim([p], policies)


EVENT = st.tuples(
    st.sampled_from(["submit", "submit", "submit", "release", "step", "yield", "tick"]),
    st.integers(0, 10_000),
)


def _check(sim: Sim, before: Snapshot, d: Decisions) -> None:
    pool_spec = sim.pools[0]
    capacity = pool_capacity(pool_spec)
    live = sim.live()
    # 1. never more granted than capacity, on any key or any device
    used: dict[str, int] = defaultdict(int)
    for lease in live:
        for key, amount in lease.resources.items():
            used[key] += amount
    for key, amount in used.items():
        if key in capacity:
            assert amount <= capacity[key], (key, amount, capacity[key])
    per_gpu: dict[str, int] = defaultdict(int)
    for lease in live:
        for item in lease.placement.items:
            per_gpu[item.gpu_uuid] += item.milli
    assert all(v <= MILLI for v in per_gpu.values()), per_gpu
    requests = {r.id: r for r in before.requests}
    # 2. non-preemptible never on borrowed capacity
    for g in d.grants:
        if not requests[g.request_id].preemptible:
            assert not g.borrowed
    # 3. a subject within its reserved share is never a victim of another subject
    leases: dict[str, Lease] = {lease.id: lease for lease in before.leases}
    reserved = {p.subject: p.reserved for p in sim.policies}
    for p in d.preemptions:
        waiter = requests[p.request_id].subject
        for lid in p.lease_ids:
            victim = leases[lid]
            assert victim.preemptible
            if victim.subject == waiter:
                assert victim.priority < requests[p.request_id].priority
                continue
            assert p.reason in {PreemptReason.RECLAIM, PreemptReason.PRIORITY, PreemptReason.FAIR_SHARE}
            assert victim.borrowed, "only leases with a borrowed part go to another subject"
            usage = sum(x.resources.get("gpu", 0) for x in before.leases if x.subject == victim.subject)
            assert usage > reserved.get(victim.subject, {}).get("gpu", 0)
    # 5. deterministic, whatever the order of the input, and the same without the memory that the
    #    sim keeps from cycle to cycle (as the reconciler's leader does) as with it
    shuffled = Snapshot(
        now=before.now,
        pools=before.pools,
        policies=list(reversed(before.policies)),
        leases=random.Random(1).sample(list(before.leases), len(before.leases)),
        requests=random.Random(2).sample(list(before.requests), len(before.requests)),
        reservations=before.reservations,
    )
    assert schedule(shuffled) == d


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds(), st.lists(EVENT, min_size=5, max_size=40), st.randoms(use_true_random=False))
def test_invariants_hold_over_random_histories(sim: Sim, events: list[tuple[str, int]], rnd: random.Random) -> None:
    subjects = [p.subject for p in sim.policies]
    for kind, n in events:
        if kind == "submit":
            gpu = rnd.choice([0.25, 0.5, 1, 1, 2, 3]) if sim.pools[0].inventory else rnd.choice([0.5, 1, 2, 4])
            sim.submit(
                rnd.choice(subjects),
                preemptible=n % 3 != 0,
                priority=n % 2,
                gpu=gpu,
                max_retries=n % 2,
            )
        else:
            play(sim, kind, rnd)
        before = as_seen(sim.snapshot())
        d = sim.step()
        _check(sim, before, d)


@settings(max_examples=150, deadline=None)
@given(
    capacity=st.integers(2, 12),
    holders=st.lists(st.tuples(st.sampled_from(["b", "c"]), st.integers(1, 3), st.integers(0, 2)), max_size=10),
    ask=st.integers(1, 6),
    owner_reserved=st.integers(0, 6),
    owner_priority=st.integers(0, 3),
)
def test_victim_sets_are_minimal(
    capacity: int, holders: list[tuple[str, int, int]], ask: int, owner_reserved: int, owner_priority: int
) -> None:
    owner_reserved = min(owner_reserved, capacity)
    sim = Sim(
        [pool("p", gpu=capacity)],
        [
            policy("owner", "p", priority=owner_priority, reserved={"gpu": owner_reserved} if owner_reserved else {}),
            policy("b", "p", priority=1),
            policy("c", "p", priority=0),
        ],
    )
    for subject, size, priority in holders:
        sim.submit(subject, True, priority=priority, gpu=size)
        sim.step()
        sim.now += timedelta(seconds=1)
    # Settle: the holders' own preemptions complete and their leftover requests go away, so that the
    # owner is the only waiter and the arithmetic below is the whole story.
    sim.release_preempting()
    for request in sim.requests.values():
        if request.state == RequestState.PENDING:
            request.state = RequestState.CANCELLED
    sim.submit("owner", True, gpu=ask)
    before = sim.snapshot()
    d = schedule(before)
    if not d.preemptions:
        return
    (plan,) = d.preemptions
    usage = sum(lease.resources["gpu"] for lease in before.leases)
    free = capacity * MILLI - usage
    sizes = {lease.id: lease.resources["gpu"] for lease in before.leases}
    released = sum(sizes[v] for v in plan.lease_ids)
    assert free + released >= ask * MILLI
    for v in plan.lease_ids:
        assert free + released - sizes[v] < ask * MILLI, "a victim whose release was not needed"
