"""The NVML watchdog: per-process GPU memory attributed to leases through their registered holders.

Holders are real (sleeping) processes, so registration, trust checks and ancestry run for real; GPU
memory comes from the fake driver or from usage tables."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from respools.backends.local.holders import HolderRegistry, register_holder
from respools.backends.local.watchdog import GpuProcess, GpuUsage, OveruseEvent, Watchdog, read_gpu_usage
from respools.model import PoolSpec
from tests.backends.fake_nvml import FakeDriver, FakeProcess
from tests.backends.helpers import (
    H100_MEMORY_MB,
    H100_UUID,
    HOST,
    fraction,
    make_lease,
    make_pool,
    two_gpu_driver,
    whole,
)

Spawn = Callable[..., subprocess.Popen[bytes]]
QUARTER = 20389  # a quarter of the H100, as the scheduler places it
WORKER = 424242  # a DataLoader worker of the holder, as NVML would list it


class Usage:
    """A settable stand-in for ``read_gpu_usage``."""

    def __init__(self) -> None:
        self.processes: list[GpuProcess] = []
        self.other_gpu: list[GpuProcess] = []

    def __call__(self) -> list[GpuUsage]:
        return [
            GpuUsage(H100_UUID, H100_MEMORY_MB, tuple(self.processes)),
            GpuUsage("GPU-other", 81559, tuple(self.other_gpu)),
        ]


@pytest.fixture
def holders(tmp_path: Path) -> HolderRegistry:
    return HolderRegistry(tmp_path / "holders")


def watchdog(
    registry: HolderRegistry, usage: Usage, events: list[OveruseEvent], parents: dict[int, int] | None = None
) -> Watchdog:
    return Watchdog(
        HOST,
        events.append,
        registry=registry,
        read_usage=usage,
        parent_of=lambda pid: (parents or {}).get(pid),
        group_of=lambda pid: None,
    )


def register_quarter(spawn: Spawn, registry: HolderRegistry) -> int:
    holder = spawn()
    register_holder(make_lease(fraction(250, QUARTER)), pid=holder.pid, directory=registry.directory)
    return holder.pid


def test_overuse_of_a_fraction_is_reported_once(spawn: Spawn, holders: HolderRegistry) -> None:
    pid = register_quarter(spawn, holders)
    usage, events = Usage(), list[OveruseEvent]()
    dog = watchdog(holders, usage, events, parents={WORKER: pid})
    pool = make_pool(settings={"preempt_on_overuse": True})

    usage.processes = [GpuProcess(pid, QUARTER)]
    assert dog.scan(pool) == [] and events == [], "at its cap"

    usage.processes = [GpuProcess(pid, 18000), GpuProcess(WORKER, 3000), GpuProcess(999, 40000)]
    assert len(dog.scan(pool)) == 1
    assert events == [
        OveruseEvent(
            lease_id="lease-1",
            pool="lab",
            host=HOST,
            gpu_uuid=H100_UUID,
            pids=sorted([pid, WORKER]),
            used_memory_mb=21000,
            cap_memory_mb=QUARTER,
            tolerance_mb=512,
            preempt=True,
            message=(
                f"lease lease-1 uses 21000 MiB on GPU {H100_UUID} (cap {QUARTER} MiB + 512 MiB tolerance; "
                f"pids {', '.join(map(str, sorted([pid, WORKER])))})"
            ),
        )
    ], "the worker counts for its holder's lease; the unrelated process 999 does not"

    dog.scan(pool)
    assert len(events) == 1, "reported once while it lasts"

    usage.processes = [GpuProcess(pid, 1000)]
    dog.scan(pool)
    usage.processes = [GpuProcess(pid, 30000)]
    dog.scan(pool)
    assert len(events) == 2, "a new episode is reported again"


def test_tolerance_covers_the_cuda_context(spawn: Spawn, holders: HolderRegistry) -> None:
    pid = register_quarter(spawn, holders)
    usage, events = Usage(), list[OveruseEvent]()
    usage.processes = [GpuProcess(pid, QUARTER + 500)]

    watchdog(holders, usage, events).scan(make_pool())
    assert events == []

    watchdog(holders, usage, events).scan(make_pool(settings={"overuse_tolerance_mb": 0}))
    assert [e.preempt for e in events] == [False], "report only: the pool does not preempt"


def test_a_gpu_outside_the_placement_is_overuse(spawn: Spawn, holders: HolderRegistry) -> None:
    pid = register_quarter(spawn, holders)
    usage, events = Usage(), list[OveruseEvent]()
    usage.other_gpu = [GpuProcess(pid, 2000)]

    watchdog(holders, usage, events).scan(make_pool())

    (event,) = events
    assert (event.gpu_uuid, event.cap_memory_mb, event.used_memory_mb) == ("GPU-other", 0, 2000)
    assert "which is not in its placement" in event.message


def test_a_whole_gpu_cannot_be_overused(spawn: Spawn, holders: HolderRegistry) -> None:
    holder = spawn()
    register_holder(make_lease(whole()), pid=holder.pid, directory=holders.directory)
    usage, events = Usage(), list[OveruseEvent]()
    usage.processes = [GpuProcess(holder.pid, H100_MEMORY_MB)]

    watchdog(holders, usage, events).scan(make_pool())

    assert events == []


def test_process_group_members_count(spawn: Spawn, holders: HolderRegistry) -> None:
    pid = register_quarter(spawn, holders)
    usage, events = Usage(), list[OveruseEvent]()
    usage.processes = [GpuProcess(WORKER, 30000)]
    dog = Watchdog(
        HOST, events.append, registry=holders, read_usage=usage, parent_of=lambda p: None, group_of=lambda p: pid
    )

    dog.scan(make_pool())

    assert [e.pids for e in events] == [[WORKER]]


def test_a_failed_report_is_retried(spawn: Spawn, holders: HolderRegistry) -> None:
    pid = register_quarter(spawn, holders)
    usage, delivered = Usage(), []
    usage.processes = [GpuProcess(pid, 30000)]
    failures = [RuntimeError("server down")]

    def report(event: OveruseEvent) -> None:
        if failures:
            raise failures.pop()
        delivered.append(event)

    dog = Watchdog(HOST, report, registry=holders, read_usage=usage, parent_of=lambda p: None, group_of=lambda p: None)
    dog.scan(make_pool())
    dog.scan(make_pool())

    assert len(delivered) == 1


def test_leases_of_other_pools_are_not_watched(spawn: Spawn, holders: HolderRegistry) -> None:
    pid = register_quarter(spawn, holders)
    usage, events = Usage(), list[OveruseEvent]()
    usage.processes = [GpuProcess(pid, 60000)]

    watchdog(holders, usage, events).scan(PoolSpec(name="elsewhere"))

    assert events == []


def test_a_dead_holder_is_not_watched(spawn: Spawn, holders: HolderRegistry) -> None:
    holder = spawn()
    register_holder(make_lease(fraction(250, QUARTER)), pid=holder.pid, directory=holders.directory)
    holder.kill()
    holder.wait()
    usage, events = Usage(), list[OveruseEvent]()
    usage.processes = [GpuProcess(holder.pid, 60000)]

    watchdog(holders, usage, events).scan(make_pool())

    assert events == [] and holders.prune() == 1


def test_read_gpu_usage_from_nvml(use_driver: Callable[[FakeDriver], FakeDriver]) -> None:
    """MIG GPUs are skipped, memory is in MiB, processes NVML cannot measure are left out."""
    driver = use_driver(two_gpu_driver([FakeProcess(101, 20000), FakeProcess(102, None)]))

    assert read_gpu_usage() == [GpuUsage(H100_UUID, H100_MEMORY_MB, (GpuProcess(101, 20000),))]
    assert driver.refcount == 0
