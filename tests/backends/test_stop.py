"""Stopping a lease's workload: SIGTERM to its registered process group, SIGKILL after the grace; and the
trust checks that keep the agent from signalling a process that did not register."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from respools.backends.local import LocalBackend, procfs
from respools.backends.local.holders import HolderRegistry, register_holder
from respools.backends.local.stopper import StopOutcome, stop_holder
from tests.backends.helpers import make_lease, make_pool, whole

Spawn = Callable[..., subprocess.Popen[bytes]]
IGNORES_SIGTERM = ("sh", "-c", "trap '' TERM; sleep 60 & wait")


@pytest.fixture
def registry(tmp_path: Path) -> HolderRegistry:
    return HolderRegistry(tmp_path / "stop-holders")


def test_stop_terminates_the_registered_group(spawn: Spawn, registry: HolderRegistry) -> None:
    workload = spawn()
    lease = make_lease(whole())
    register_holder(lease, pid=workload.pid, directory=registry.directory)

    LocalBackend(registry=registry).stop(lease, make_pool())

    assert workload.wait(timeout=5) == -signal.SIGTERM
    assert registry.get(lease.id) is None, "the registration is removed"


def test_a_workload_ignoring_sigterm_is_killed(spawn: Spawn, registry: HolderRegistry) -> None:
    workload = spawn(*IGNORES_SIGTERM)
    _wait_for_members(workload.pid, 2)  # the shell has set its trap and started its child
    register_holder(make_lease(whole()), pid=workload.pid, directory=registry.directory)
    holder = registry.get("lease-1")
    assert holder is not None and holder.pgid == workload.pid

    outcome = stop_holder(holder, kill_after_s=0.3)

    assert outcome is StopOutcome.KILLED
    assert workload.wait(timeout=5) == -signal.SIGKILL
    assert list(procfs.group_members(workload.pid)) == [], "the child in the group is gone too"


def _wait_for_members(pgid: int, count: int, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while len(list(procfs.group_members(pgid))) < count:
        assert time.monotonic() < deadline, f"process group {pgid} never reached {count} members"
        time.sleep(0.01)


def test_stop_without_a_registration_does_nothing(registry: HolderRegistry) -> None:
    LocalBackend(registry=registry).stop(make_lease(whole()), make_pool())


def test_a_recycled_pid_is_not_signalled(spawn: Spawn, registry: HolderRegistry) -> None:
    workload = spawn()
    path = register_holder(make_lease(whole()), pid=workload.pid, directory=registry.directory)
    path.write_text(path.read_text().replace('"start_time":', '"start_time":1'))  # another process's start

    assert registry.get("lease-1") is None
    LocalBackend(registry=registry).stop(make_lease(whole()), make_pool())
    assert workload.poll() is None


def test_a_registration_by_another_user_is_ignored(
    spawn: Spawn, registry: HolderRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only root or the process's owner may say which lease a process runs."""
    workload = spawn()
    path = register_holder(make_lease(whole()), pid=workload.pid, directory=registry.directory)
    if os.getuid() == 0:
        os.chown(path, 12345, -1)  # written by a user who does not own the (root's) process
    else:
        monkeypatch.setattr(procfs, "owner_uid", lambda pid: os.getuid() + 1)

    assert registry.get("lease-1") is None
    assert registry.holders() == []


def test_our_own_group_is_never_signalled(registry: HolderRegistry) -> None:
    """A holder registered with the caller's group gets only its PID signalled; here it is already gone."""
    lease = make_lease(whole())
    child = subprocess.Popen(("sleep", "60"))  # same process group as the test runner
    try:
        register_holder(lease, pid=child.pid, directory=registry.directory)
        holder = registry.get(lease.id)
        assert holder is not None and holder.pgid == os.getpgrp()

        assert stop_holder(holder, kill_after_s=5) is StopOutcome.TERMINATED
        assert child.wait(timeout=5) == -signal.SIGTERM
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
