"""Wait reasons word one amount with a shortcut of ``format_resources``; they must read the same."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from respools.model import format_resources
from respools.scheduling.fit import _amount


@given(
    st.sampled_from(["gpu", "mcpu", "memory_mb", "step_run", "mig.3g.40gb", "tensorrt_sessions"]), st.integers(1, 10**9)
)
def test_one_amount_reads_as_format_resources_writes_it(key: str, value: int) -> None:
    assert _amount(key, value) == format_resources({key: value})


def test_nothing_left_is_written_as_zero_of_the_key() -> None:
    assert _amount("gpu", 0) == "gpu 0"
