"""``DeviceMap.fits_released`` against the way it replaces: release every lease on the map, ask
``fits``, apply them again. It touches only the freed GPUs' own counters and skips the hosts' totals,
so it must answer the same on any map, and leave the map exactly as it found it."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from respools.model import PoolSpec
from respools.scheduling.placement import DeviceMap, Held, Shape, freed

from .inventory import A100_80, H100, host, mig_host

_PROFILES = ["1g.10gb", "2g.20gb", "3g.40gb"]


def _map(rnd: random.Random) -> DeviceMap:
    hosts = []
    for index in range(rnd.randint(1, 4)):
        if rnd.random() < 0.25:
            hosts.append(mig_host(f"m{index}", [rnd.choice(_PROFILES) for _ in range(rnd.randint(1, 4))]))
        else:
            labels = {"zone": rnd.choice("ab")} if rnd.random() < 0.5 else {}
            hosts.append(host(f"h{index}", rnd.randint(1, 4), rnd.choice([H100, A100_80]), **labels))
    return DeviceMap(PoolSpec.model_validate({"name": "p", "inventory": hosts}))


def _shape(rnd: random.Random) -> Shape:
    kind = rnd.random()
    return Shape(
        whole=rnd.randint(1, 3) if kind < 0.45 else 0,
        fraction=rnd.choice([250, 500, 750]) if 0.45 <= kind < 0.85 else 0,
        mig=((rnd.choice(_PROFILES), rnd.randint(1, 2)),) if kind >= 0.85 else (),
        memory_mb=rnd.choice([0, 0, 20000]) if 0.45 <= kind < 0.85 else 0,
        gpu_class=rnd.choice([None, None, "a100", "h100"]),
        selectors=(("zone", "a"),) if rnd.random() < 0.2 else (),
        replicas=rnd.choice([1, 1, 1, 2]),
    )


def _snapshot(devices: DeviceMap) -> list[object]:
    return [
        (h.free_whole, h.free_milli, dict(h.free_mig), [(g.used_milli, g.used_memory, set(g.mig_used)) for g in h.gpus])
        for h in devices.hosts
    ]


@settings(max_examples=300, deadline=None, database=None, derandomize=True)
@given(st.integers(0, 2**32))
def test_fits_released_answers_as_releasing_every_lease_would(seed: int) -> None:
    rnd = random.Random(seed)
    devices = _map(rnd)
    leases: list[Held] = []
    for _ in range(rnd.randint(0, 12)):  # fill the map with leases placed the way the cycle places them
        placement = devices.place(_shape(rnd))
        if placement is not None and placement.items:
            devices.occupy(placement)
            leases.append(devices.resolve(placement))
    released = [held for held in leases if rnd.random() < 0.5]
    parts = [freed(released[:1]), freed(released[1:])] if rnd.random() < 0.5 else [freed(released)]
    for _ in range(4):
        shape = _shape(rnd)
        if devices.fits(shape):
            continue  # asked only of shapes that do not fit now
        before = _snapshot(devices)
        got = devices.fits_released(shape, parts)
        assert _snapshot(devices) == before, "the map is left as it was"
        devices.release_all(released)
        expected = devices.fits(shape)
        for held in released:
            devices.apply(held)
        assert got == expected, (shape, released)
