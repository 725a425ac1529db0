"""DESIGN §2's ZenML Pro scenarios, one row per line of the table."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from respools.model import PolicySpec, PoolSpec, RequestState, WaitReason

from .sim import Sim, policy, pool


def R(**v: float) -> dict[str, float]:
    return v


L = R


@dataclass
class Ask:
    subject: str
    preemptible: bool
    resources: dict[str, float]
    count: int = 1


def ask(subject: str, p: bool = False, count: int = 1, **resources: float) -> Ask:
    return Ask(subject, p, resources, count)


@dataclass
class Expect:
    granted: int = 0
    borrowed: float | None = None
    rejected: str | None = None
    waits: WaitReason | None = None
    on_pool: str | None = None
    preempts: int | None = None


@dataclass
class Row:
    id: str
    pools: list[PoolSpec]
    policies: list[PolicySpec]
    ask: Ask
    expect: Expect
    holds: list[Ask] = field(default_factory=list)


A8 = [policy("a", "p", 10, R(gpu=4), L(gpu=8))]
A4_CPU = [policy("a", "p", 10, R(gpu=2, mcpu=4000), L(gpu=4, mcpu=32000))]
SANDBOX_PROD = [policy("sandbox", "p", 10, R(gpu=4), L(gpu=8)), policy("prod", "p", 100, R(gpu=2), L(gpu=8))]

ROWS = [
    Row("E1", [pool("p", gpu=8)], A8, ask("a", p=True, gpu=6), Expect(granted=1, borrowed=2)),
    Row("E2", [pool("p", gpu=8)], A8, ask("a", gpu=2), Expect(granted=1, borrowed=0)),
    Row("E3", [pool("p", gpu=8)], A8, ask("a", gpu=6), Expect(rejected="reserved")),
    Row(
        "E4",
        [pool("p", gpu=4)],
        [policy("a", "p", 10, R(gpu=2), L(gpu=4))],
        ask("a", gpu=1, mcpu=32000, memory_mb=65536),
        Expect(granted=1),
    ),
    Row("E5", [pool("p", gpu=4, mcpu=32000)], A4_CPU, ask("a", gpu=1, mcpu=2000), Expect(granted=1)),
    Row("E6", [pool("p", gpu=4, mcpu=32000)], A4_CPU, ask("a", gpu=1, mcpu=8000), Expect(rejected="mcpu")),
    Row("E7", [pool("p", gpu=4, mcpu=32000)], A4_CPU, ask("a", p=True, gpu=1, mcpu=8000), Expect(granted=1)),
    Row(
        "E9",
        [pool("p", gpu=4, mcpu=8000)],
        [policy("a", "p", 10, R(gpu=2), L(gpu=4))],
        ask("a", gpu=1, mcpu=1000),
        Expect(rejected="mcpu"),
    ),
    Row(
        "E10",
        [pool("p", gpu=16, step_run=10)],
        [policy("a", "p", 10, R(gpu=8, step_run=4), L(gpu=16, step_run=4))],
        ask("a", p=True, count=5, gpu=2),
        Expect(granted=4, waits=WaitReason.STEP_RUN_SLOTS),
    ),
    Row(
        "E13",
        [pool("p", gpu=8)],
        [policy("a", "p", 10, R(gpu=8), L(gpu=8))],
        ask("a", p=True, gpu=10),
        Expect(rejected="has gpu 8 in all"),
    ),
    Row(
        "E14",
        [pool("p", gpu=8)],
        [policy("a", "p", 10, R(gpu=2), L(gpu=4))],
        ask("a", p=True, gpu=6),
        Expect(rejected="limited to gpu 4"),
    ),
    Row(
        "E16",
        [pool("p", gpu=8)],
        SANDBOX_PROD,
        ask("prod", p=True, gpu=4),
        Expect(granted=1, preempts=2),
        holds=[ask("sandbox", p=True, count=6, gpu=1)],
    ),
    Row(
        "E17",
        [pool("p", gpu=8)],
        SANDBOX_PROD,
        ask("prod", gpu=2),
        Expect(waits=WaitReason.RESERVED_SHARE, preempts=0),
        holds=[ask("sandbox", p=True, count=6, gpu=1), ask("prod", gpu=2)],
    ),
    Row(
        "E18",
        [pool("west", gpu=16), pool("north", gpu=16)],
        [policy("a", "west", 20, R(gpu=8), L(gpu=16)), policy("a", "north", 10, R(gpu=8), L(gpu=16))],
        ask("a", p=True, gpu=1),
        Expect(granted=1, on_pool="west"),
    ),
    Row(
        "E19",
        [pool("pool-a", gpu=8), pool("pool-b", gpu=8, tensorrt_sessions=4)],
        [policy("a", "pool-a", 10), policy("a", "pool-b", 10)],
        ask("a", p=True, gpu=1, tensorrt_sessions=1),
        Expect(granted=1, on_pool="pool-b"),
    ),
]


def _submit(sim: Sim, a: Ask) -> list[str]:
    return [sim.submit(a.subject, a.preemptible, resources=dict(a.resources)) for _ in range(a.count)]


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_zenml_scenario(row: Row) -> None:
    sim = Sim(row.pools, row.policies)
    for holding in row.holds:
        held = _submit(sim, holding)
        sim.step()
        assert all(sim.requests[r].state == RequestState.GRANTED for r in held)
    ids = _submit(sim, row.ask)
    first = sim.step()
    expect = row.expect

    if expect.rejected is not None:
        assert [r.request_id for r in first.rejects] == ids
        assert expect.rejected in sim.rejected[ids[0]]
        return
    assert not first.rejects

    victims = [lid for p in first.preemptions for lid in p.lease_ids]
    if expect.preempts is not None:
        assert len(victims) == expect.preempts
        assert all(sim.leases[v].subject != row.ask.subject for v in victims)
    if victims:  # the holders step aside; the capacity is held for the waiter and granted next cycle
        sim.release_preempting()
        sim.step()

    granted = [r for r in ids if sim.requests[r].state == RequestState.GRANTED]
    assert len(granted) == expect.granted
    waiting = [r for r in ids if sim.requests[r].state == RequestState.PENDING]
    if expect.waits is not None:
        assert waiting and all(sim.requests[r].wait_reason == expect.waits for r in waiting)
    for rid in granted:
        lease = sim.lease_of(rid)
        if expect.borrowed is not None:
            assert lease.borrowed.get("gpu", 0) / 1000 == expect.borrowed
        if expect.on_pool is not None:
            assert lease.pool == expect.on_pool
        if not row.ask.preemptible:
            assert not lease.borrowed, "non-preemptible leases never sit on borrowed capacity"


def test_e16_victims_are_the_borrowed_leases_and_sandbox_keeps_its_share() -> None:
    sim = Sim([pool("p", gpu=8)], SANDBOX_PROD)
    for _ in range(6):
        sim.submit("sandbox", True, gpu=1)
    sim.step()
    borrowed = {lease.id for lease in sim.live("sandbox") if lease.borrowed}
    assert len(borrowed) == 2
    sim.submit("prod", True, gpu=4)
    d = sim.step()
    assert set(d.preemptions[0].lease_ids) == borrowed
    assert d.preemptions[0].reason.value == "priority"
    sim.release_preempting()
    sim.step()
    assert sim.held("sandbox") == 4 and sim.held("prod") == 4


def test_e18_no_lease_on_the_second_pool() -> None:
    sim = Sim(
        [pool("west", gpu=16), pool("north", gpu=16)],
        [policy("a", "west", 20, R(gpu=8), L(gpu=16)), policy("a", "north", 10, R(gpu=8), L(gpu=16))],
    )
    sim.submit("a", True, gpu=1)
    sim.step()
    assert sim.held("a", pool="north") == 0 and sim.held("a", pool="west") == 1
