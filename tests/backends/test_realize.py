"""Realization by the local backend: whole GPUs, MIG slices and fractions with their memory caps, with and
without an MPS daemon, and the leases it must refuse."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from respools.backends.local import LocalBackend
from respools.backends.local.mps import DEFAULT_PIPE_DIR, MpsState, probe_mps
from respools.backends.protocol import BackendError
from respools.model import Form, Gpu, Host, MigInstance, PlacementItem
from tests.backends.helpers import (
    A100_UUID,
    H100_MEMORY_MB,
    H100_UUID,
    HOST,
    MIG_2G_A,
    MIG_3G,
    fraction,
    make_lease,
    make_pool,
    mig,
    whole,
)

NO_MPS = MpsState(running=False, pipe_dir=DEFAULT_PIPE_DIR)
MPS = MpsState(running=True, pipe_dir=DEFAULT_PIPE_DIR)
INVENTORY = [
    Host(
        name=HOST,
        gpus=[
            Gpu(
                uuid=A100_UUID,
                index=0,
                model="NVIDIA A100-SXM4-80GB",
                memory_mb=81920,
                mig_enabled=True,
                mig_instances=[
                    MigInstance(uuid=MIG_3G, profile="3g.40gb"),
                    MigInstance(uuid=MIG_2G_A, profile="2g.20gb"),
                ],
            ),
            Gpu(uuid=H100_UUID, index=1, model="NVIDIA H100 80GB HBM3", memory_mb=H100_MEMORY_MB),
        ],
    )
]
CAP_VARS = {
    "RESPOOLS_GPU_FRACTION",
    "RESPOOLS_GPU_MEMORY_MB",
    "RESPOOLS_GPU_MEMORY_FRACTION",
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
}


def backend(mps: MpsState = NO_MPS) -> LocalBackend:
    return LocalBackend(mps_probe=lambda: mps)


def test_whole_gpus_by_uuid_in_index_order() -> None:
    lease = make_lease(whole(H100_UUID, 1), whole("GPU-00000000-aaaa-4bbb-8ccc-dddddddddddd", 0))

    realization = backend().realize(lease, make_pool())

    assert realization.backend == "local"
    assert realization.env == {
        "RESPOOLS_LEASE_ID": "lease-1",
        "CUDA_VISIBLE_DEVICES": f"GPU-00000000-aaaa-4bbb-8ccc-dddddddddddd,{H100_UUID}",
    }
    assert realization.notes == []


def test_mig_slice_by_mig_uuid() -> None:
    realization = backend().realize(make_lease(mig(MIG_3G, "3g.40gb")), make_pool(INVENTORY))

    assert realization.env["CUDA_VISIBLE_DEVICES"] == MIG_3G
    assert not CAP_VARS & realization.env.keys(), "a MIG slice is isolated by the hardware"
    assert realization.native["devices"] == [
        {
            "gpu_uuid": A100_UUID,
            "gpu_index": 0,
            "mig_uuid": MIG_3G,
            "mig_profile": "3g.40gb",
            "milli": 0,
            "memory_cap_mb": None,
        }
    ]


def test_several_mig_slices_say_one_per_process() -> None:
    realization = backend().realize(make_lease(mig(MIG_3G, "3g.40gb"), mig(MIG_2G_A, "2g.20gb")), make_pool(INVENTORY))

    assert realization.env["CUDA_VISIBLE_DEVICES"] == f"{MIG_3G},{MIG_2G_A}"
    assert any("at most one MIG device" in note for note in realization.notes)


def test_fraction_gets_memory_caps_for_every_framework() -> None:
    quarter_mb = H100_MEMORY_MB * 250 // 1000
    realization = backend().realize(make_lease(fraction(250, quarter_mb)), make_pool(INVENTORY))

    assert realization.env == {
        "RESPOOLS_LEASE_ID": "lease-1",
        "CUDA_VISIBLE_DEVICES": H100_UUID,
        "RESPOOLS_GPU_FRACTION": "0.25",
        "RESPOOLS_GPU_MEMORY_MB": "20389",
        "RESPOOLS_GPU_MEMORY_MB_PER_DEVICE": "20389",
        "RESPOOLS_GPU_MEMORY_FRACTION": "0.2499",  # 20389 / 81559, rounded down
        "RESPOOLS_GPU_MEMORY_FRACTIONS": "0.2499",
        "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.2499",
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
        "TF_FORCE_GPU_ALLOW_GROWTH": "true",
    }
    assert any("apply_torch_memory_cap" in note for note in realization.notes)
    assert any("no MPS daemon" in note for note in realization.notes)


def test_fraction_with_an_explicit_memory_cap() -> None:
    """A request for gpu 0.5 with gpu_memory_mb 16000: memory follows the cap, compute the share."""
    realization = backend().realize(make_lease(fraction(500, 16000)), make_pool(INVENTORY))

    assert realization.env["RESPOOLS_GPU_FRACTION"] == "0.5"
    assert realization.env["RESPOOLS_GPU_MEMORY_MB"] == "16000"
    assert realization.env["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.1961"


def test_fraction_without_inventory_or_cap_uses_the_share() -> None:
    realization = backend().realize(make_lease(fraction(500)), make_pool())

    assert realization.env["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.5"
    assert "RESPOOLS_GPU_MEMORY_MB" not in realization.env


def test_fraction_under_mps_gets_driver_enforced_limits() -> None:
    realization = backend(MPS).realize(make_lease(fraction(250, 20389)), make_pool(INVENTORY))

    assert realization.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert realization.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=20389M"
    assert "CUDA_MPS_PIPE_DIRECTORY" not in realization.env, "the default pipe directory needs no telling"
    assert realization.native["mps"] is True
    assert not any("no MPS daemon" in note for note in realization.notes)


def test_mps_with_a_custom_pipe_directory_is_passed_on() -> None:
    custom = MpsState(running=True, pipe_dir=Path("/var/run/mps"))

    realization = backend(custom).realize(make_lease(fraction(500, 30000)), make_pool(INVENTORY))

    assert realization.env["CUDA_MPS_PIPE_DIRECTORY"] == "/var/run/mps"


def test_mps_leaves_whole_gpus_alone() -> None:
    realization = backend(MPS).realize(make_lease(whole()), make_pool(INVENTORY))

    assert not CAP_VARS & realization.env.keys()


def test_whole_and_fraction_in_one_lease_get_per_device_caps() -> None:
    other = "GPU-00000000-aaaa-4bbb-8ccc-dddddddddddd"
    lease = make_lease(whole(other, 0), fraction(250, 20389))

    realization = backend(MPS).realize(lease, make_pool(INVENTORY))

    assert realization.env["CUDA_VISIBLE_DEVICES"] == f"{other},{H100_UUID}"
    assert realization.env["RESPOOLS_GPU_MEMORY_FRACTIONS"] == "1,0.2499"
    assert realization.env["RESPOOLS_GPU_MEMORY_MB_PER_DEVICE"] == ",20389"
    assert realization.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "1=20389M", "ordinal of the visible device"
    assert any("strictest" in note for note in realization.notes)


def test_lease_placed_on_another_host_is_refused() -> None:
    lease = make_lease(PlacementItem(host="gpu-b", gpu_uuid=H100_UUID, gpu_index=0))

    with pytest.raises(BackendError, match=r"lease lease-1 is placed on gpu-b, not on this host 'gpu-a'"):
        backend().realize(lease, make_pool())


def test_multi_host_lease_realizes_this_hosts_part() -> None:
    lease = make_lease(whole(), PlacementItem(host="gpu-b", gpu_uuid="GPU-b0", gpu_index=0))

    realization = backend().realize(lease, make_pool())

    assert realization.env["CUDA_VISIBLE_DEVICES"] == H100_UUID
    assert any("1 of 2 devices are on this host" in note for note in realization.notes)


def test_lease_without_gpus_sees_none() -> None:
    realization = backend().realize(make_lease(resources={"step_run": 1}), make_pool())

    assert realization.env["CUDA_VISIBLE_DEVICES"] == ""


def test_same_device_twice_is_listed_once() -> None:
    realization = backend().realize(make_lease(fraction(250, 10000), fraction(250, 10000)), make_pool(INVENTORY))

    assert realization.env["CUDA_VISIBLE_DEVICES"] == H100_UUID
    assert realization.env["RESPOOLS_GPU_FRACTION"] == "0.5"
    assert realization.env["RESPOOLS_GPU_MEMORY_MB"] == "20000"


def test_mig_item_without_uuid_is_refused() -> None:
    item = PlacementItem(host=HOST, gpu_uuid=A100_UUID, gpu_index=0, mig_profile="3g.40gb", milli=0)

    with pytest.raises(BackendError, match="has no MIG UUID"):
        backend().realize(make_lease(item), make_pool())


def test_lease_of_another_stack_is_refused() -> None:
    with pytest.raises(BackendError, match="runs on stack 'kubernetes'"):
        backend().realize(make_lease(whole(), stack="kubernetes"), make_pool())


def test_realization_is_plain_json() -> None:
    realization = backend(MPS).realize(make_lease(fraction(250, 20389)), make_pool(INVENTORY))

    assert json.loads(realization.model_dump_json())["env"]["CUDA_VISIBLE_DEVICES"] == H100_UUID


# -- pool validation -----------------------------------------------------------------------------------------


def test_local_expresses_every_form() -> None:
    local = backend()
    local.validate_pool(make_pool(forms=[Form.WHOLE, Form.MIG, Form.FRACTION]))

    assert local.effective_forms(make_pool(forms=[Form.MIG])) == {Form.MIG}


def test_unknown_setting_is_refused_with_the_known_ones() -> None:
    with pytest.raises(BackendError) as caught:
        backend().validate_pool(make_pool(settings={"preempt_on_overusee": True}))

    assert str(caught.value) == (
        "pool 'lab': settings.preempt_on_overusee: Extra inputs are not permitted "
        "(the local stack knows preempt_on_overuse, overuse_tolerance_mb, stop_kill_after_s)"
    )


def test_bad_setting_value_is_refused() -> None:
    with pytest.raises(
        BackendError, match=r"settings.overuse_tolerance_mb: Input should be greater than or equal to 0"
    ):
        backend().validate_pool(make_pool(settings={"overuse_tolerance_mb": -1}))


# -- MPS detection -------------------------------------------------------------------------------------------


def _pipe_dir(tmp_path: Path, pid: int | None) -> dict[str, str]:
    pipe_dir = tmp_path / "mps"
    pipe_dir.mkdir()
    os.mkfifo(pipe_dir / "control")
    if pid is not None:
        (pipe_dir / "nvidia-cuda-mps-control.pid").write_text(f"{pid}\n")
    return {"CUDA_MPS_PIPE_DIRECTORY": str(pipe_dir)}


def test_mps_daemon_with_live_pid(tmp_path: Path) -> None:
    state = probe_mps(_pipe_dir(tmp_path, os.getpid()))

    assert state.running and state.custom_pipe_dir


def test_mps_daemon_without_pid_file(tmp_path: Path) -> None:
    assert probe_mps(_pipe_dir(tmp_path, None)).running


def test_mps_fifo_left_by_a_dead_daemon(tmp_path: Path) -> None:
    assert not probe_mps(_pipe_dir(tmp_path, 2**22 + 12345)).running


def test_no_mps_daemon(tmp_path: Path) -> None:
    assert not probe_mps({"CUDA_MPS_PIPE_DIRECTORY": str(tmp_path)}).running
