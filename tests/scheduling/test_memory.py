"""``Memory``: what a leader keeps from one cycle to the next must never change a decision, while
requests come and go, leases are granted, preempted and released, and the platform team changes
pools, policies and reservations between cycles (each change a new object, as the store hands them
over)."""

from __future__ import annotations

import random
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from respools.model import ReservationSpec
from respools.scheduling import Memory, schedule

from .inventory import host
from .sim import Sim, as_seen, play, policy, pool

SUBJECTS = ["a", "b", "c"]
HOSTS = [host("h0", 4, zone="z1"), host("h1", 4, zone="z2"), host("h2", 2, zone="z1")]

EVENT = st.sampled_from(
    ["submit", "submit", "submit", "release", "yield", "tick", "policy", "inventory", "reservation", "drain", "lost"]
)
"""``lost``: the cycle's decisions are never committed (the leader lost its lock or the database
failed), so the next cycle sees the same store while the memory saw the cycle decide."""


def _world() -> Sim:
    pools = [pool("p", inventory=HOSTS[:2], fair_share_preemption=True), pool("q", gpu=4)]
    policies = [
        policy("a", "p", reserved={"gpu": 3}, limit={"gpu": 8}),
        policy("b", "p", reserved={"gpu": 2}),
        policy("c", "p", priority=1),
        policy("a", "q", reserved={"gpu": 2}),
        policy("c", "q"),
    ]
    return Sim(pools, policies)


def _change_policy(sim: Sim, rnd: random.Random) -> None:
    """A new object for one policy: another priority, weight or limit (its reserved share stays, so
    the definitions stay valid); or a policy of ``b`` on ``q`` that comes and goes."""
    extra = [index for index, p in enumerate(sim.policies) if (p.subject, p.pool) == ("b", "q")]
    if rnd.random() < 0.3:
        if extra:
            del sim.policies[extra[0]]
        else:
            sim.policies.append(policy("b", "q", limit=rnd.choice([None, {"gpu": 1.0}])))
        return
    index = rnd.randrange(len(sim.policies))
    old = sim.policies[index]
    gpus = float(max(1, old.reserved.get("gpu", 0) // 1000) + rnd.randint(0, 4))
    limit = rnd.choice([None, {"gpu": gpus}])
    sim.policies[index] = policy(
        old.subject,
        old.pool,
        priority=rnd.randint(0, 2),
        reserved={key: amount / 1000 for key, amount in old.reserved.items()},
        limit=limit,
        weight=rnd.choice([0.5, 1.0, 2.0]),
    )


def _change_inventory(sim: Sim, rnd: random.Random) -> None:
    """A new object for pool ``p`` with hosts added or taken away (leases on a host that left keep
    their records; their devices are simply gone)."""
    hosts = rnd.choice([HOSTS[:2], HOSTS, [HOSTS[0], HOSTS[2]]])
    changed = pool("p", inventory=hosts, fair_share_preemption=True)
    sim.pools[0] = changed.model_copy(update={"draining": sim.pools[0].draining})


def _toggle_draining(sim: Sim, rnd: random.Random) -> None:
    index = rnd.randrange(len(sim.pools))
    old = sim.pools[index]
    sim.pools[index] = old.model_copy(update={"draining": not old.draining})


def _add_reservation(sim: Sim, rnd: random.Random) -> None:
    """A window for a subject on ``p`` that begins now or soon and ends a few ticks later."""
    start = sim.now + timedelta(seconds=rnd.randint(0, 2))
    sim.reservations.append(
        ReservationSpec.model_validate(
            {
                "subject": rnd.choice(SUBJECTS),
                "pool": "p",
                "resources": {"gpu": rnd.randint(1, 2)},
                "start": start,
                "end": start + timedelta(seconds=rnd.randint(1, 3)),
            }
        )
    )


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(EVENT, min_size=5, max_size=40), st.randoms(use_true_random=False))
def test_a_remembering_cycle_decides_as_a_fresh_one(events: list[str], rnd: random.Random) -> None:
    sim = _world()
    memory = Memory()
    for kind in events:
        if kind == "submit":
            sim.submit(
                rnd.choice(SUBJECTS),
                preemptible=rnd.random() < 0.7,
                priority=rnd.randint(0, 1),
                gpu=rnd.choice([0.25, 0.5, 1, 1, 2, 4]),
                selectors=rnd.choice([{}, {}, {"zone": "z1"}]),
                max_retries=1,
            )
        elif kind == "policy":
            _change_policy(sim, rnd)
        elif kind == "inventory":
            _change_inventory(sim, rnd)
        elif kind == "reservation":
            _add_reservation(sim, rnd)
        elif kind == "drain":
            _toggle_draining(sim, rnd)
        else:
            play(sim, kind, rnd)
        fresh = schedule(as_seen(sim.snapshot()))
        remembered = schedule(sim.snapshot(), memory)
        assert remembered == fresh
        if kind != "lost":
            sim.apply(remembered)


def test_a_preemption_that_was_never_committed_is_planned_again() -> None:
    """The memory's lease views are marked preempting while a cycle plans; a cycle whose decisions
    were lost must not leave the next one believing the victims already go."""
    sim = Sim([pool("p", gpu=4)], [policy("a", "p", reserved={"gpu": 4}), policy("b", "p")])
    memory = Memory()
    sim.submit("b", preemptible=True, gpu=4)
    sim.apply(schedule(sim.snapshot(), memory))
    sim.submit("a", gpu=4)
    lost = schedule(sim.snapshot(), memory)
    assert [p.lease_ids for p in lost.preemptions] == [tuple(lease.id for lease in sim.live("b"))]
    again = schedule(sim.snapshot(), memory)
    assert again == lost == schedule(sim.snapshot())
