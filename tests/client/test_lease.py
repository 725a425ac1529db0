"""Holding a lease in-process against a real server: the environment is set for the block and restored
after, the host agent's holder file exists exactly while the block runs, the lease is released however
the block ends, heartbeats keep it alive past its TTL, and requests that cannot be granted say why."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

import respools
from respools.client import NoActiveLease, NotGranted, WaitTimeout
from respools.model import RequestState
from tests.client.conftest import WorldFactory, wait_for


def test_the_block_sees_its_devices_and_everything_is_undone_after(world: WorldFactory) -> None:
    w = world(gpus=2)
    os.environ["CUDA_VISIBLE_DEVICES"] = "all-of-them"
    holders = Path(os.environ["RESPOOLS_RUN_DIR"])
    events: list[str] = []
    session = respools.lease(
        gpu=1,
        pool=w.pool,
        client=w.client,
        progress=False,
        on_granted=lambda s: events.append(f"granted {s.attempt}"),
        on_released=lambda s: events.append("released"),
    )
    with session as lease:
        assert respools.current_lease() is lease
        device = os.environ["CUDA_VISIBLE_DEVICES"]
        assert device.startswith(f"GPU-{w.pool.removeprefix('pool-')}-") and "," not in device
        assert os.environ["RESPOOLS_LEASE_ID"] == lease.id and os.environ["RESPOOLS_ATTEMPT"] == "0"
        assert lease.env["CUDA_VISIBLE_DEVICES"] == device
        assert w.client.get_lease(lease.id).state == RequestState.ACTIVE
        holder = json.loads((holders / f"{lease.id}.json").read_text())
        assert holder["pid"] == os.getpid() and holder["items"][0]["gpu_uuid"] == device
        assert not lease.preempted and lease.time_left == float("inf")
        lease.check()  # no notice: nothing raised
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "all-of-them" and "RESPOOLS_LEASE_ID" not in os.environ
    assert not (holders / f"{lease.id}.json").exists()
    assert w.client.get_lease(lease.id).state == RequestState.RELEASED
    assert events == ["granted 0", "released"]
    with pytest.raises(NoActiveLease):
        respools.current_lease()


def test_a_pool_without_inventory_leaves_the_device_variables_alone(world: WorldFactory) -> None:
    w = world({"gpu": 4})
    with respools.lease(gpu=0.5, client=w.client, progress=False) as lease:
        assert "CUDA_VISIBLE_DEVICES" not in os.environ
        assert os.environ["RESPOOLS_REQUEST_ID"] == lease.request_id
        assert lease.lease.resources["gpu"] == 500


@pytest.mark.parametrize("error", [RuntimeError("step failed"), KeyboardInterrupt()])
def test_the_lease_is_released_when_the_block_fails(world: WorldFactory, error: BaseException) -> None:
    w = world()
    with pytest.raises(type(error)), respools.lease(gpu=1, client=w.client, progress=False) as lease:
        raise error
    assert w.client.get_lease(lease.id).state == RequestState.RELEASED


def test_heartbeats_keep_the_lease_alive_past_its_ttl(world: WorldFactory) -> None:
    w = world(ttl_s=1.0)
    with respools.lease(gpu=1, client=w.client, progress=False) as lease:
        time.sleep(3.2)  # more than three TTLs
        assert w.client.get_lease(lease.id).state == RequestState.ACTIVE
        assert not lease.lost


def test_a_request_that_can_never_fit_is_rejected_with_the_reason(world: WorldFactory) -> None:
    w = world({"gpu": 1})
    with pytest.raises(NotGranted) as raised, respools.lease(gpu=4, client=w.client, progress=False):
        pytest.fail("the block must not run")
    assert raised.value.state == RequestState.REJECTED and raised.value.request.reason


def test_waiting_too_long_cancels_the_request(world: WorldFactory) -> None:
    w = world({"gpu": 1})
    with respools.lease(gpu=1, client=w.client, progress=False):
        waiting = respools.lease(gpu=1, client=w.client, progress=False, timeout=0.5)
        with pytest.raises(WaitTimeout), waiting:
            pytest.fail("the block must not run")
    cancelled = w.client.list_requests(states=[RequestState.CANCELLED])
    assert [r.state for r in cancelled] == [RequestState.CANCELLED]


def test_a_waiter_is_granted_when_the_holder_releases(world: WorldFactory) -> None:
    w = world({"gpu": 1})
    granted = threading.Event()
    order: list[str] = []

    def second() -> None:
        with respools.lease(gpu=1, client=w.client, progress=False):
            order.append("second")
            granted.set()

    with respools.lease(gpu=1, client=w.client, progress=False):
        thread = threading.Thread(target=second)
        thread.start()
        wait_for(lambda: w.client.list_requests(states=[RequestState.PENDING]))
        time.sleep(0.3)
        assert not granted.is_set()
        order.append("first")
    assert granted.wait(10)
    thread.join(10)
    assert order == ["first", "second"]


def test_a_lease_cancelled_under_the_step_raises_lease_lost(world: WorldFactory) -> None:
    w = world()
    with pytest.raises(respools.LeaseLost) as raised, respools.lease(gpu=1, client=w.client, progress=False) as lease:
        w.admin.post(f"/v1/requests/{lease.request_id}/cancel")
        end = time.monotonic() + 10
        while time.monotonic() < end:
            pass
        pytest.fail("LeaseLost did not arrive")
    assert not isinstance(raised.value, respools.LeasePreempted)
    assert raised.value.state == RequestState.CANCELLED and "cancelled by its owner" in str(raised.value)
    assert raised.value.requeued is False


def test_ctrl_c_while_waiting_withdraws_the_request(world: WorldFactory) -> None:
    w = world({"gpu": 1})
    main = threading.main_thread().ident
    assert main is not None and threading.current_thread() is threading.main_thread()
    with respools.lease(gpu=1, client=w.client, progress=False):
        ctrl_c = threading.Timer(0.5, signal.pthread_kill, (main, signal.SIGINT))
        ctrl_c.start()
        with pytest.raises(KeyboardInterrupt), respools.lease(gpu=1, client=w.client, progress=False):
            pytest.fail("the block must not run")
    assert [r.state for r in w.client.list_requests(states=[RequestState.CANCELLED])] == [RequestState.CANCELLED]


def test_a_checkpoint_report_reaches_the_lease(world: WorldFactory) -> None:
    """``lease.checkpointed()`` and ``respools.checkpointed()`` record the checkpoint on the held lease;
    outside any lease the module function sends nothing and answers ``None``."""
    w = world({"gpu": 2})
    assert respools.checkpointed() is None
    with respools.lease(gpu=1, client=w.client, progress=False) as lease:
        first = lease.checkpointed()
        assert first.checkpoints == 1 and first.checkpointed_at is not None
        second = respools.checkpointed()
        assert second is not None and second.checkpoints == 2
    assert w.client.get_lease(lease.id).checkpoints == 2
