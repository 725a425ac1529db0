"""Deriving MIG profile names from slices and memory, for cards whose driver gives no profile table.
Memory figures are what NVML reports for the instances (MiB) on each card."""

from __future__ import annotations

import pytest

from respools.backends.local.profiles import MigShape, ProfileInfo, clean_profile_name, derived_name, profile_name


@pytest.mark.parametrize(
    ("slices", "memory_mb", "total_mb", "expected"),
    [
        (1, 9728, 81920, "1g.10gb"),  # A100-SXM4-80GB
        (3, 40192, 81920, "3g.40gb"),
        (7, 80896, 81920, "7g.80gb"),
        (1, 4864, 40960, "1g.5gb"),  # A100-SXM4-40GB
        (3, 19968, 40960, "3g.20gb"),
        (1, 5836, 24576, "1g.6gb"),  # A30: four memory slices, still eighths
        (2, 11672, 24576, "2g.12gb"),
        (1, 9856, 81559, "1g.10gb"),  # H100 80GB HBM3: an 80 GB card with 81559 MiB
        (1, 11264, 95830, "1g.12gb"),  # H100 NVL 94GB
        (2, 23808, 95830, "2g.24gb"),
        (3, 71168, 143771, "3g.71gb"),  # H200 141GB: half of 141 rounds up
        (1, 16896, 143771, "1g.18gb"),
    ],
)
def test_derived_name(slices: int, memory_mb: int, total_mb: int, expected: str) -> None:
    assert derived_name(slices, memory_mb, total_mb) == expected


def test_table_name_wins_and_is_cleaned() -> None:
    table = [ProfileInfo(name="MIG 2g.20gb", slices=2, memory_mb=19968)]
    shape = MigShape(gpu_instance_slices=2, compute_instance_slices=2, memory_mb=19968)

    assert profile_name(shape, table, 81920) == "2g.20gb"
    assert clean_profile_name(" MIG 1g.10gb+me ") == "1g.10gb+me"
