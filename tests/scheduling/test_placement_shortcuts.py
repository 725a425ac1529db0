"""The shortcuts that preemption planning and eligibility take through the device map must answer
exactly what the full placement search answers: ``fits`` what ``place`` finds, ``fits_when_empty``
what a search on the empty inventory finds, and a resolved placement what ``occupy`` does."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from respools.model import PoolSpec
from respools.scheduling.placement import DeviceMap, Shape

from .inventory import host, mig_host

PROFILES = ["3g.40gb", "2g.20gb", "1g.10gb"]

inventories = st.lists(
    st.one_of(
        st.integers(min_value=1, max_value=8).map(lambda n: ("plain", n)),
        st.lists(st.sampled_from(PROFILES), min_size=1, max_size=4).map(lambda p: ("mig", p)),
    ),
    min_size=1,
    max_size=6,
)

replicas = st.integers(1, 3)
shapes = st.one_of(
    st.tuples(st.integers(1, 9), replicas).map(lambda t: Shape(whole=t[0], replicas=t[1])),
    st.tuples(st.sampled_from([125, 250, 500, 750]), replicas).map(lambda t: Shape(fraction=t[0], replicas=t[1])),
    st.tuples(st.sampled_from(PROFILES), st.integers(1, 3), replicas).map(
        lambda t: Shape(mig=((t[0], t[1]),), replicas=t[2])
    ),
)


def _pool(layout: list[tuple[str, object]]) -> PoolSpec:
    hosts = [
        host(f"h{i}", spec) if kind == "plain" else mig_host(f"h{i}", spec)  # type: ignore[arg-type]
        for i, (kind, spec) in enumerate(layout)
    ]
    return PoolSpec.model_validate({"name": "p", "inventory": hosts})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layout=inventories, shape=shapes)
def test_fits_when_empty_agrees_with_a_search_of_the_empty_inventory(
    layout: list[tuple[str, object]], shape: Shape
) -> None:
    empty = DeviceMap(_pool(layout))
    assert empty.fits_when_empty(shape) == (empty.place(shape) is not None)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layout=inventories, fill=st.lists(shapes, max_size=12), shape=shapes, data=st.data())
def test_fits_and_resolved_release_agree_with_place_and_occupy(
    layout: list[tuple[str, object]], fill: list[Shape], shape: Shape, data: st.DataObject
) -> None:
    devices = DeviceMap(_pool(layout))
    placed = []
    for s in fill:  # occupy the map with whatever fits
        placement = devices.place(s)
        if placement is not None:
            devices.occupy(placement)
            placed.append(placement)
    assert devices.fits(shape) == (devices.place(shape) is not None)

    # Releasing through resolved placements leaves the map exactly as releasing through occupy(-1).
    released = data.draw(st.lists(st.sampled_from(placed), unique_by=id) if placed else st.just([]))
    held = [devices.resolve(p) for p in released]
    devices.release_all(held)
    after_resolved = _state(devices)
    fits_after = devices.fits(shape)
    for devices_of_lease in held:
        devices.apply(devices_of_lease)
    for placement in released:
        devices.occupy(placement, -1)
    assert _state(devices) == after_resolved
    assert fits_after == (devices.place(shape) is not None)


def _state(devices: DeviceMap) -> list[tuple[object, ...]]:
    return [
        (h.free_whole, h.free_milli, dict(h.free_mig), [(g.used_milli, g.used_memory, set(g.mig_used)) for g in h.gpus])
        for h in devices.hosts
    ]
