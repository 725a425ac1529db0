"""The in-process helpers that turn a realization's caps into PyTorch and TensorFlow settings. torch and
tensorflow are faked as modules (third-party libraries, recorded calls); the helpers are ours."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from respools.backends.local.caps import read_memory_fractions, read_memory_mb
from respools.backends.local.tf_cap import apply_tf_memory_cap
from respools.backends.local.torch_cap import apply_torch_memory_cap


def fake_torch(monkeypatch: pytest.MonkeyPatch, devices: int, available: bool = True) -> list[tuple[float, int]]:
    calls: list[tuple[float, int]] = []
    cuda = types.SimpleNamespace(
        is_available=lambda: available,
        device_count=lambda: devices,
        set_per_process_memory_fraction=lambda fraction, device: calls.append((fraction, device)),
    )
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    return calls


def test_torch_cap_per_device(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = fake_torch(monkeypatch, devices=2)

    applied = apply_torch_memory_cap({"RESPOOLS_GPU_MEMORY_FRACTIONS": "1,0.2499"})

    assert applied == {1: 0.2499}
    assert calls == [(0.2499, 1)], "the whole GPU is left uncapped"


def test_torch_cap_from_the_single_fraction(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = fake_torch(monkeypatch, devices=1)

    assert apply_torch_memory_cap({"RESPOOLS_GPU_MEMORY_FRACTION": "0.5"}) == {0: 0.5}
    assert calls == [(0.5, 0)]


def test_torch_cap_without_a_cap_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = fake_torch(monkeypatch, devices=1)

    assert apply_torch_memory_cap({}) == {}
    assert calls == []


def test_torch_cap_without_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_torch(monkeypatch, devices=0, available=False)

    assert apply_torch_memory_cap({"RESPOOLS_GPU_MEMORY_FRACTION": "0.5"}) == {}


def test_torch_cap_without_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ImportError

    assert apply_torch_memory_cap({"RESPOOLS_GPU_MEMORY_FRACTION": "0.5"}) == {}


def test_bad_fraction_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_torch(monkeypatch, devices=1)

    with pytest.raises(ValueError, match="must be numbers between 0 and 1"):
        apply_torch_memory_cap({"RESPOOLS_GPU_MEMORY_FRACTION": "half"})
    with pytest.raises(ValueError, match=r"must be in \(0, 1\]"):
        read_memory_fractions({"RESPOOLS_GPU_MEMORY_FRACTION": "1.5"}, 1)


def test_tf_cap_sets_a_logical_device_per_capped_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, list[Any]]] = []
    config = types.SimpleNamespace(
        list_physical_devices=lambda kind: ["/physical_device:GPU:0", "/physical_device:GPU:1"],
        set_logical_device_configuration=lambda gpu, logical: calls.append((gpu, logical)),
        LogicalDeviceConfiguration=lambda memory_limit: {"memory_limit": memory_limit},
    )
    monkeypatch.setitem(sys.modules, "tensorflow", types.SimpleNamespace(config=config))

    applied = apply_tf_memory_cap({"RESPOOLS_GPU_MEMORY_MB_PER_DEVICE": ",20389", "RESPOOLS_GPU_MEMORY_MB": "20389"})

    assert applied == {1: 20389}
    assert calls == [("/physical_device:GPU:1", [{"memory_limit": 20389}])]


def test_tf_cap_without_tensorflow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorflow", None)

    assert apply_tf_memory_cap({"RESPOOLS_GPU_MEMORY_MB": "1000"}) == {}


def test_memory_mb_falls_back_to_the_single_value() -> None:
    assert read_memory_mb({"RESPOOLS_GPU_MEMORY_MB": "1000"}, 2) == [1000, 1000]
    assert read_memory_mb({}, 1) == [None]
