"""NVML discovery against the fake driver: GPUs, MIG instances and their profiles, and hosts where NVML is
missing or broken. The last test runs real discovery where a driver exists."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from respools.backends.local import LocalBackend, nvml
from respools.backends.local.discovery import discover_host
from respools.model import Gpu, MigInstance
from tests.backends.fake_nvml import FakeDriver, FakeMig, a100_80gb_mig, l4
from tests.backends.helpers import (
    A100_UUID,
    H100_UUID,
    HOST,
    MIG_2G_A,
    MIG_2G_B,
    MIG_3G,
    make_pool,
    two_gpu_driver,
)

UseDriver = Callable[[FakeDriver], FakeDriver]


def test_two_gpu_host_with_mig_and_without(use_driver: UseDriver) -> None:
    driver = use_driver(two_gpu_driver())

    found = discover_host(HOST)

    assert found.reason is None and found.host is not None
    assert found.host.name == HOST
    assert found.host.labels == {"nvidia_driver_version": "550.54.15"}
    assert found.host.gpus == [
        Gpu(
            uuid=A100_UUID,
            index=0,
            model="NVIDIA A100-SXM4-80GB",
            memory_mb=81920,
            mig_enabled=True,
            mig_instances=[
                MigInstance(uuid=MIG_3G, profile="3g.40gb"),
                MigInstance(uuid=MIG_2G_A, profile="2g.20gb"),
                MigInstance(uuid=MIG_2G_B, profile="2g.20gb"),
            ],
            attributes={"compute_capability": "8.0"},
        ),
        Gpu(
            uuid=H100_UUID,
            index=1,
            model="NVIDIA H100 80GB HBM3",
            memory_mb=81559,
            attributes={"compute_capability": "9.0"},
        ),
    ]
    assert driver.refcount == 0, "every nvmlInit is matched by nvmlShutdown"


def _profiles(driver: FakeDriver) -> list[str]:
    found = discover_host(HOST)
    assert found.host is not None, found.reason
    return [m.profile for gpu in found.host.gpus for m in gpu.mig_instances]


SAME_SHAPE_MIGS = [
    FakeMig("MIG-a", "1g.10gb"),
    FakeMig("MIG-b", "1g.10gb+me"),
    FakeMig("MIG-c", "1g.20gb"),
    FakeMig("MIG-d", "3g.40gb", compute_slices=1),
]


def test_profile_names_come_from_the_profile_table(use_driver: UseDriver) -> None:
    """1g.10gb and 1g.10gb+me differ only in media engines, 1g.10gb and 1g.20gb only in memory, and a
    one-slice compute instance in a 3g GPU instance is '1c.3g.40gb'."""
    driver = use_driver(FakeDriver([a100_80gb_mig(A100_UUID, SAME_SHAPE_MIGS)]))

    assert _profiles(driver) == ["1g.10gb", "1g.10gb+me", "1g.20gb", "1c.3g.40gb"]


def test_profile_names_are_derived_without_the_table(use_driver: UseDriver) -> None:
    """Old drivers cannot list profiles: names come from slices and memory (media extensions are lost)."""
    migs = [*SAME_SHAPE_MIGS, FakeMig("MIG-e", "2g.20gb")]
    driver = use_driver(FakeDriver([a100_80gb_mig(A100_UUID, migs)], profile_table=False))

    assert _profiles(driver) == ["1g.10gb", "1g.10gb", "1g.20gb", "1c.3g.40gb", "2g.20gb"]


def test_full_gpu_instance(use_driver: UseDriver) -> None:
    driver = use_driver(FakeDriver([a100_80gb_mig(A100_UUID, [FakeMig("MIG-full", "7g.80gb")])]))

    assert _profiles(driver) == ["7g.80gb"]


def test_mig_mode_on_without_instances(use_driver: UseDriver) -> None:
    use_driver(FakeDriver([a100_80gb_mig(A100_UUID, [])]))

    found = discover_host(HOST)

    assert found.host is not None
    assert found.host.gpus[0].mig_enabled and found.host.gpus[0].mig_instances == []


def test_gpu_without_mig_support(use_driver: UseDriver) -> None:
    use_driver(FakeDriver([l4("GPU-l4")]))

    found = discover_host(HOST)

    assert found.host is not None
    (gpu,) = found.host.gpus
    assert (gpu.model, gpu.memory_mb, gpu.mig_enabled) == ("NVIDIA L4", 23034, False)


def test_no_driver_is_one_line_and_no_host(use_driver: UseDriver, caplog: pytest.LogCaptureFixture) -> None:
    use_driver(FakeDriver([], library_missing=True))
    backend = LocalBackend()

    with caplog.at_level(logging.WARNING):
        hosts = backend.discover(make_pool())

    assert hosts == []
    assert backend.unavailable_reason == (
        "no NVIDIA driver on this host (libnvidia-ml.so.1 not found); it has no GPUs to offer"
    )
    (record,) = caplog.records
    assert record.getMessage() == f"host {HOST}: {backend.unavailable_reason}"
    assert record.exc_info is None, "no traceback"


def test_without_nvidia_ml_py(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nvml, "pynvml", None)

    found = discover_host(HOST)

    assert found.host is None
    assert found.reason == "nvidia-ml-py is not installed; install 'respools[nvml]' to discover GPUs"


def test_a_lost_gpu_fails_discovery_in_one_line(use_driver: UseDriver) -> None:
    driver = two_gpu_driver()
    driver.gpus[1].lost = True
    use_driver(driver)

    found = discover_host(HOST)

    assert found.host is None
    assert found.reason == "a GPU fell off the bus (NVML: GPU is lost); the host needs attention"
    assert driver.refcount == 0


def test_real_discovery() -> None:
    """Runs NVML for real where a driver is present (a GPU machine); skipped with the reason elsewhere."""
    found = discover_host(HOST)
    if found.host is None:
        pytest.skip(f"no usable NVIDIA driver here: {found.reason}")
    for gpu in found.host.gpus:
        assert gpu.uuid.startswith("GPU-") and gpu.memory_mb > 0
        for instance in gpu.mig_instances:
            assert instance.uuid.startswith("MIG-") and "g." in instance.profile
