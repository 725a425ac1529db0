"""Time of one scheduling decision cycle as pools, subjects, leases and queues grow.

Each size builds a fleet of 8-GPU hosts split into pools of 256 GPUs, subjects with reserved shares on
one or two pools, active leases (fractions and whole GPUs filling the fleet) and a queue of waiting
requests of mixed shapes. It times ``schedule(snapshot)`` on the cycle when the whole queue arrives at
once (every reserved share reclaimed in one go, the worst case), and in steady state, once the offline
simulation (``respools.simulation``) has settled the fleet. "cycle_ms" is the steady cycle as the
reconciler's leader runs it, cycle after cycle, with what it kept from the cycle before (``Memory``);
"first_cycle_ms" is the same cycle for a leader that has just taken over, whose memory is empty; the
arrival cycle is timed that way too, since every request in it is new.

    python benchmarks/scheduling.py            # a table
    python benchmarks/scheduling.py --json     # {"cycle_ms": {"1000x100x10000x2000": ...}, ...}
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from rich.console import Console
from rich.table import Table

from respools.model import PolicySpec, PoolSpec
from respools.scheduling import Decisions, Memory, Snapshot, schedule
from respools.simulation import Simulation

NOW = datetime(2026, 1, 1, tzinfo=UTC)
GPUS_PER_HOST = 8
GPUS_PER_POOL = 256


@dataclass(frozen=True)
class Size:
    gpus: int
    subjects: int
    waiting: int
    leases: int

    @property
    def label(self) -> str:
        return f"{self.gpus}x{self.subjects}x{self.waiting}x{self.leases}"


SIZES = [
    Size(64, 8, 640, 128),
    Size(128, 13, 1250, 250),
    Size(250, 25, 2500, 500),
    Size(500, 50, 5000, 1000),
    Size(1000, 100, 10000, 2000),
]


def _pools(size: Size) -> list[PoolSpec]:
    pools = []
    hosts_total = size.gpus // GPUS_PER_HOST
    per_pool = max(1, GPUS_PER_POOL // GPUS_PER_HOST)
    for p, start in enumerate(range(0, hosts_total, per_pool)):
        hosts = [
            {
                "name": f"p{p}-h{h}",
                "gpus": [
                    {"uuid": f"GPU-{p}-{h}-{g}", "index": g, "model": "NVIDIA H100 80GB HBM3", "memory_mb": 81559}
                    for g in range(GPUS_PER_HOST)
                ],
            }
            for h in range(start, min(start + per_pool, hosts_total))
        ]
        pools.append(PoolSpec.model_validate({"name": f"pool-{p}", "inventory": hosts}))
    return pools


def _policies(size: Size, pools: list[PoolSpec], rnd: random.Random) -> list[PolicySpec]:
    policies = []
    for s in range(size.subjects):
        home = pools[s % len(pools)]
        home_gpus = sum(len(h.gpus) for h in home.inventory or [])
        subjects_here = max(1, size.subjects // len(pools))
        reserved = max(0, home_gpus // (2 * subjects_here))
        names = [home.name] + ([pools[(s + 1) % len(pools)].name] if len(pools) > 1 and s % 3 == 0 else [])
        for rank, name in enumerate(names):
            policies.append(
                PolicySpec.model_validate(
                    {
                        "subject": f"team-{s}",
                        "pool": name,
                        "reserved": {"gpu": reserved} if rank == 0 else {},
                        "priority": rnd.choice([0, 10, 20]) - rank,
                        "weight": rnd.choice([1, 1, 2, 4]),
                    }
                )
            )
    return policies


def build(size: Size, seed: int = 7) -> tuple[Snapshot, Snapshot, int]:
    """The fleet at two moments: right after ``size.waiting`` requests arrive on a full fleet (a
    preemption storm: reclaims of every reserved share at once), and once that has settled."""
    rnd = random.Random(seed)
    pools = _pools(size)
    sim = Simulation(pools, _policies(size, pools, rnd), now=NOW)
    subjects = sorted({p.subject for p in sim.policies})
    # Fill the fleet: 70% of the leases are quarter GPUs, 30% whole GPUs (~95% of GPUs in use).
    for i in range(size.leases):
        gpu = 0.25 if i < size.leases * 7 // 10 else 1.0
        sim.submit(subjects[i % len(subjects)], True, gpu=gpu, max_retries=100)
    sim.step()
    shapes = [0.25, 0.5, 1, 1, 1, 2, 4]
    for _ in range(size.waiting):
        sim.submit(
            rnd.choice(subjects),
            rnd.random() < 0.8,
            priority=rnd.choice([0, 0, 0, 1]),
            gpu=rnd.choice(shapes),
            max_retries=100,
        )
    arrival = sim.snapshot()
    frozen = Snapshot(
        now=arrival.now,
        pools=arrival.pools,
        policies=arrival.policies,
        leases=[lease.model_copy(deep=True) for lease in arrival.leases],
        requests=[r.model_copy(deep=True) for r in arrival.requests],
    )
    cycles = sim.settle()
    return frozen, sim.snapshot(), cycles


def _time(snapshot: Snapshot, repeats: int, remembered: bool) -> tuple[float, Decisions]:
    """Median ms of ``repeats`` cycles. ``remembered``: as the reconciler's leader runs them, with the
    memory it kept from the cycle before; otherwise as a new leader's first cycle, with none."""
    memory = Memory()
    decisions = schedule(snapshot, memory)
    times = []
    for _ in range(repeats):
        if not remembered:
            memory = Memory()
        start = time.perf_counter()
        decisions = schedule(snapshot, memory)
        times.append((time.perf_counter() - start) * 1000)
    return round(statistics.median(times), 2), decisions


def measure(size: Size, repeats: int) -> dict[str, float | int]:
    arrival, steady, cycles = build(size)
    arrival_ms, storm = _time(arrival, repeats, remembered=False)
    steady_ms, decisions = _time(steady, repeats, remembered=True)
    first_ms, _ = _time(steady, repeats, remembered=False)
    return {
        "cycle_ms": steady_ms,
        "first_cycle_ms": first_ms,
        "arrival_cycle_ms": arrival_ms,
        "arrival_preemptions": sum(len(p.lease_ids) for p in storm.preemptions),
        "settle_cycles": cycles,
        "leases": len(steady.leases),
        "waiting": len(steady.requests),
        "grants": len(decisions.grants),
        "preemptions": sum(len(p.lease_ids) for p in decisions.preemptions),
        "waits": decisions.waiting,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object of the figures")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--max-gpus", type=int, default=1000)
    args = parser.parse_args()
    results = {s.label: measure(s, args.repeats) for s in SIZES if s.gpus <= args.max_gpus}
    if args.json:
        print(json.dumps({"cycle_ms": {k: v["cycle_ms"] for k, v in results.items()}, "detail": results}))
        return
    table = Table(title="One scheduling cycle, median ms (steady state; and the cycle when the queue arrives)")
    columns = (
        "GPUs x subjects x waiting x leases",
        "steady ms",
        "new leader ms",
        "leases",
        "waiting",
        "arrival ms",
        "arrival preempts",
    )
    for column in columns:
        table.add_column(column, justify="right")
    for label, r in results.items():
        table.add_row(
            label,
            f"{r['cycle_ms']:.1f}",
            f"{r['first_cycle_ms']:.1f}",
            str(r["leases"]),
            str(r["waiting"]),
            f"{r['arrival_cycle_ms']:.1f}",
            str(r["arrival_preemptions"]),
        )
    Console().print(table)


if __name__ == "__main__":
    main()
