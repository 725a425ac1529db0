"""The SDK fences itself (DESIGN §2.8): a holder still inside its block at the preemption deadline stops
its own workload and reports the release before it ends, and the owner waiting for the capacity gets it
only after that: ``respools run`` with a command that ignores SIGTERM, ``lease(interrupt=False)`` in a
process that ignores the notice, and ``fence=False`` leaving the lease overdue until the caller stops."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from respools.model import EventKind, RequestSpec, RequestState
from tests.client.conftest import World, WorldFactory, wait_for
from tests.client.server import SRC
from tests.client.test_run import RUN, STUBBORN, alive

IGNORES_NOTICE = textwrap.dedent(
    """
    import sys, time
    import respools
    pool, marks, fence = sys.argv[1], sys.argv[2], sys.argv[3] == "fence"
    with respools.lease(gpu=1, pool=pool, preemptible=True, interrupt=False, fence=fence) as lease:
        open(marks + "/lease", "w").write(lease.id)
        while not (fence is False and lease.time_left < -1.5):
            time.sleep(0.02)
    open(marks + "/left", "w").write(repr(time.time()))
    """
)


def _env(w: World, token: str) -> dict[str, str]:
    return os.environ | {"PYTHONPATH": SRC, "RESPOOLS_URL": w.admin.url, "RESPOOLS_TOKEN": token}


def _ended_how(w: World, lease_id: str) -> str:
    events = w.admin.events(lease_id=lease_id)
    return next(e.message for e in events if e.kind == EventKind.PREEMPTED)


def test_a_lease_holder_that_ignores_notice_ends_itself_at_the_deadline(world: WorldFactory, tmp_path: Path) -> None:
    """The process ends at the deadline and its release reaches the service only once it is gone, so the
    GPUs are never handed over while it still holds them."""
    w = world({"gpu": 1})
    script = tmp_path / "ignores.py"
    script.write_text(IGNORES_NOTICE)
    holder = subprocess.Popen(
        [sys.executable, str(script), w.pool, str(tmp_path), "fence"], env=_env(w, w.token), stderr=subprocess.PIPE
    )
    try:
        lease_id = wait_for(lambda: (tmp_path / "lease").exists() and (tmp_path / "lease").read_text(), timeout=30)
        w.admin.preempt_lease(lease_id, grace_s=1.0)
        while alive(holder.pid):
            time.sleep(0.001)
        exited = time.time()
        _, err = holder.communicate(timeout=30)
    finally:
        if holder.poll() is None:
            holder.kill()
    assert holder.returncode == 137, err
    assert not (tmp_path / "left").exists(), "the block never ran to its end: the process was fenced"
    lease = wait_for(lambda: (lease := w.client.get_lease(lease_id)).state == RequestState.PREEMPTED and lease)
    assert lease.released_at is not None and lease.preempt_deadline is not None
    assert lease.released_at >= lease.preempt_deadline
    assert lease.released_at.timestamp() >= exited - 0.005, "the release was reported only once the process was gone"
    assert "released by its holder" in _ended_how(w, lease_id)
    assert b"still inside its block at the preemption deadline" in err


def test_fence_false_leaves_the_lease_overdue_until_the_block_ends(world: WorldFactory, tmp_path: Path) -> None:
    w = world({"gpu": 1}, ttl_s=30)
    script = tmp_path / "ignores.py"
    script.write_text(IGNORES_NOTICE)
    holder = subprocess.Popen(
        [sys.executable, str(script), w.pool, str(tmp_path), "nofence"], env=_env(w, w.token), stderr=subprocess.PIPE
    )
    try:
        lease_id = wait_for(lambda: (tmp_path / "lease").exists() and (tmp_path / "lease").read_text(), timeout=30)
        w.admin.preempt_lease(lease_id, grace_s=0.5)
        overdue = wait_for(lambda: w.client.get_lease(lease_id).overdue_since, timeout=10)
        assert w.client.get_lease(lease_id).state == RequestState.PREEMPTING, overdue
        _, err = holder.communicate(timeout=30)
    finally:
        if holder.poll() is None:
            holder.kill()
    assert holder.returncode == 0, err
    left = float((tmp_path / "left").read_text())
    lease = w.client.get_lease(lease_id)
    assert lease.state == RequestState.PREEMPTED and lease.released_at is not None
    assert lease.released_at.timestamp() <= left + 0.5 and "released by its holder" in _ended_how(w, lease_id)


def test_the_owner_gets_the_gpu_only_after_a_stubborn_run_step_is_gone(world: WorldFactory, tmp_path: Path) -> None:
    """The owner (reserved share) reclaims the GPU a borrower's ``respools run`` step holds; the step
    ignores SIGTERM, so it is killed at the deadline, and the owner's grant comes after its release."""
    w = world({"gpu": 1}, grace_s=1.0)
    borrower = w.token_for("borrower", reserved={}, priority=10)
    script = tmp_path / "stubborn.py"
    script.write_text(STUBBORN)
    argv = [*RUN, "--gpu", "1", "--pool", w.pool, "--preemptible", "--", sys.executable, str(script), str(tmp_path)]
    run = subprocess.Popen(
        argv, env=_env(w, borrower.config.token or ""), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_for(lambda: (tmp_path / "ready").exists(), timeout=30)
        (victim,) = borrower.list_leases(live=True)
        owner = w.client.submit(RequestSpec(resources={"gpu": 1}, pools=[w.pool]), wait=0.2)
        assert owner.state == RequestState.PENDING
        granted = wait_for(lambda: w.client.wait_request(owner.id, timeout=2).state == RequestState.GRANTED, 30)
        _, err = run.communicate(timeout=30)
    finally:
        if run.poll() is None:
            run.kill()
    assert granted and run.returncode == 128 + 9, err
    worker = int((tmp_path / "worker").read_text())
    assert not alive(worker), "the whole group was gone before the lease was released"
    ended = w.admin.get_lease(victim.id)
    grant = next(e for e in w.admin.events(request_id=owner.id) if e.kind == EventKind.GRANTED)
    assert ended.released_at is not None and ended.preempt_deadline is not None
    assert ended.released_at >= ended.preempt_deadline and grant.at >= ended.released_at
    assert "released by its holder" in _ended_how(w, victim.id)
