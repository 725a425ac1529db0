"""Valid machine/accelerator pairs: fixed-shape families pick the machine by count; N1 bounds the vCPUs."""

from __future__ import annotations

import pytest
from respools_vertex.machines import MachineShape, machine_for, supported_accelerators, valid_counts

from respools.backends.protocol import BackendError


@pytest.mark.parametrize(
    ("accelerator", "count", "machine_type"),
    [
        ("NVIDIA_TESLA_A100", 1, "a2-highgpu-1g"),
        ("NVIDIA_TESLA_A100", 8, "a2-highgpu-8g"),
        ("NVIDIA_TESLA_A100", 16, "a2-megagpu-16g"),
        ("NVIDIA_A100_80GB", 4, "a2-ultragpu-4g"),
        ("NVIDIA_H100_80GB", 2, "a3-highgpu-2g"),
        ("NVIDIA_H100_MEGA_80GB", 8, "a3-megagpu-8g"),
        ("NVIDIA_H200_141GB", 8, "a3-ultragpu-8g"),
        ("NVIDIA_B200", 8, "a4-highgpu-8g"),
        ("NVIDIA_L4", 1, "g2-standard-4"),
        ("NVIDIA_L4", 2, "g2-standard-24"),
        ("NVIDIA_L4", 8, "g2-standard-96"),
        ("NVIDIA_TESLA_T4", 4, "n1-standard-32"),
        ("NVIDIA_TESLA_V100", 1, "n1-standard-8"),
    ],
)
def test_the_default_machine_for_each_valid_count(accelerator: str, count: int, machine_type: str) -> None:
    assert machine_for(accelerator, count) == MachineShape(machine_type, count)


@pytest.mark.parametrize(
    ("accelerator", "count", "valid"),
    [
        ("NVIDIA_TESLA_A100", 3, "1, 2, 4, 8, 16"),
        ("NVIDIA_H200_141GB", 4, "8"),
        ("NVIDIA_L4", 6, "1, 2, 4, 8"),
        ("NVIDIA_TESLA_T4", 8, "1, 2, 4"),
    ],
)
def test_a_count_no_machine_type_offers_is_refused_naming_the_valid_counts(
    accelerator: str, count: int, valid: str
) -> None:
    with pytest.raises(BackendError, match=f"valid counts are {valid}$"):
        machine_for(accelerator, count)


def test_a_chosen_machine_type_must_carry_the_count() -> None:
    assert machine_for("NVIDIA_L4", 1, "g2-standard-16") == MachineShape("g2-standard-16", 1)
    with pytest.raises(BackendError, match=r"use g2-standard-48"):
        machine_for("NVIDIA_L4", 4, "g2-standard-16")


def test_n1_machines_are_bounded_by_vcpus_per_gpu_count() -> None:
    assert machine_for("NVIDIA_TESLA_T4", 1, "n1-highmem-16") == MachineShape("n1-highmem-16", 1)
    with pytest.raises(BackendError, match=r"at most 12 vCPUs"):
        machine_for("NVIDIA_TESLA_V100", 1, "n1-standard-16")
    with pytest.raises(BackendError, match=r"N1 machine type"):
        machine_for("NVIDIA_TESLA_T4", 1, "e2-standard-8")


def test_accelerators_without_a_table_are_refused_naming_the_supported_ones() -> None:
    with pytest.raises(BackendError, match=r"supported for NVIDIA_A100_80GB, "):
        valid_counts("TPU_V3")
    assert "NVIDIA_TESLA_K80" not in supported_accelerators()
