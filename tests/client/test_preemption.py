"""Preemption against a real server: the holder of a low-priority lease gets :class:`LeasePreempted` in its
own thread within about a second of the scheduler's decision, checkpoints, and — with ``max_retries`` —
runs again from its checkpoint once its request, requeued at its original place, is granted again.

The delay printed here is measured from the server's ``preempting`` event (the decision, stamped with the
reconciler's transaction time) to the ``except`` clause in the step."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

import respools
from respools.client import Client, LeasePreempted, LeaseSession
from respools.model import EventKind, RequestState
from tests.client.conftest import WorldFactory, wait_for

MAX_DELAY_S = 1.0


def busy(seconds: float) -> None:
    """Pure-Python work, like a training loop's bookkeeping between kernels."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def decision_time(client: Client, lease_id: str) -> float:
    events = client.events(lease_id=lease_id, kinds=[EventKind.PREEMPTING])
    assert len(events) == 1, events
    return events[0].at.timestamp()


class Preemptor(threading.Thread):
    """Waits for ``go``, then holds a higher-priority lease for ``hold_s``."""

    def __init__(self, client: Client, go: threading.Event, hold_s: float = 0.5, priority: int = 5) -> None:
        super().__init__(daemon=True)
        self.client, self.go, self.hold_s, self.priority = client, go, hold_s, priority
        self.granted_at: float | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.go.wait(30)
            with respools.lease(gpu=1, priority=self.priority, client=self.client, progress=False):
                self.granted_at = time.time()
                time.sleep(self.hold_s)
        except BaseException as exc:
            self.error = exc


def test_preempted_step_checkpoints_is_requeued_and_resumes(world: WorldFactory, tmp_path: Path) -> None:
    w = world({"gpu": 1}, grace_s=10)
    checkpoint = tmp_path / "checkpoint"
    started = threading.Event()
    runs: list[tuple[int, int, str]] = []  # (attempt, first step, request id)
    caught: list[tuple[LeasePreempted, float]] = []
    hooks: list[str] = []
    total_steps = 120

    @respools.requires(
        gpu=1,
        preemptible=True,
        max_retries=2,
        retry_backoff_s=0.05,
        client=w.client,
        progress=False,
        on_granted=lambda s: hooks.append(f"granted:{s.attempt}"),
        on_preempted=lambda s: hooks.append(f"preempted:{s.attempt}"),
        on_requeued=lambda s: hooks.append("requeued"),
        on_released=lambda s: hooks.append("released"),
    )
    def train() -> int:
        lease = respools.current_lease()
        step = int(checkpoint.read_text()) if lease.attempt else 0
        runs.append((lease.attempt, step, lease.request_id))
        try:
            while step < total_steps:
                step += 1
                if step == 20:
                    started.set()
                busy(0.01)
        except LeasePreempted as exc:
            caught.append((exc, time.time()))
            checkpoint.write_text(str(step))
            raise
        return step

    preemptor = Preemptor(w.client, started)
    preemptor.start()
    assert train() == total_steps
    preemptor.join(30)
    assert preemptor.error is None

    assert len(caught) == 1, "preempted exactly once"
    exc, caught_at = caught[0]
    assert exc.lease is not None and exc.reason is not None and exc.deadline is not None
    assert exc.requeued and exc.next_attempt == 1
    delay = caught_at - decision_time(w.client, exc.lease.id)
    print(f"\npreemption delay (decision -> LeasePreempted in the step): {delay * 1000:.1f} ms")
    assert 0 <= delay < MAX_DELAY_S

    resumed_from = int(checkpoint.read_text())
    assert 20 <= resumed_from < total_steps
    assert [(a, s) for a, s, _ in runs] == [(0, 0), (1, resumed_from)]
    assert runs[0][2] == runs[1][2], "the rerun waits on the same request"
    request = w.client.get_request(runs[0][2])
    assert (request.state, request.attempt) == (RequestState.RELEASED, 1)
    assert preemptor.granted_at is not None and preemptor.granted_at < caught_at + 5, "released before the deadline"
    assert hooks == ["granted:0", "preempted:0", "released", "requeued", "granted:1", "released"]


def test_without_retries_the_notice_propagates_and_the_request_ends(world: WorldFactory) -> None:
    w = world({"gpu": 1}, grace_s=10)
    go = threading.Event()
    preemptor = Preemptor(w.client, go, hold_s=0.1)
    preemptor.start()
    with pytest.raises(LeasePreempted) as raised, respools.lease(gpu=1, preemptible=True, client=w.client) as lease:
        go.set()
        busy(10)
        pytest.fail("no notice within 10 s")
    preemptor.join(30)
    assert raised.value.requeued is False and raised.value.lease is not None
    assert raised.value.lease.id == lease.id
    assert w.client.get_request(lease.request_id).state == RequestState.PREEMPTED


def test_polling_loops_see_the_notice_without_being_interrupted(world: WorldFactory) -> None:
    w = world({"gpu": 1}, grace_s=8)
    with respools.lease(gpu=1, preemptible=True, client=w.client, interrupt=False, progress=False) as lease:
        w.admin.preempt_lease(lease.id, message="maintenance")
        wait_for(lambda: lease.preempted, timeout=5)
        assert 5 < lease.time_left <= 8
        busy(0.2)  # no exception arrives in the block
        with pytest.raises(LeasePreempted, match="maintenance"):
            lease.check()
    assert w.client.get_lease(lease.id).state == RequestState.PREEMPTED


def test_sleep_ends_early_on_notice(world: WorldFactory) -> None:
    w = world({"gpu": 1}, grace_s=8)
    with pytest.raises(LeasePreempted), respools.lease(gpu=1, client=w.client, progress=False) as lease:
        threading.Timer(0.3, lambda: w.admin.preempt_lease(lease.id)).start()
        started = time.monotonic()
        try:
            lease.sleep(30)
        finally:
            assert time.monotonic() - started < 5


def test_a_step_that_swallows_the_notice_and_finishes_gives_up_its_requeued_request(world: WorldFactory) -> None:
    w = world({"gpu": 1}, grace_s=8)
    session: LeaseSession = respools.lease(gpu=1, max_retries=3, client=w.client, progress=False)
    with session as lease:
        try:
            w.admin.preempt_lease(lease.id)
            busy(10)
        except LeasePreempted:
            pass  # the step decides it is done
    request = w.client.get_request(lease.request_id)
    assert request.state == RequestState.CANCELLED and request.attempt == 1


def test_notice_before_the_block_starts_raises_at_entry(world: WorldFactory) -> None:
    w = world({"gpu": 1}, grace_s=8)
    ran: list[int] = []

    def preempt_when_granted(session: LeaseSession) -> None:
        w.admin.preempt_lease(session.id)
        wait_for(lambda: session.preempted, timeout=5)

    with (
        pytest.raises(LeasePreempted),
        respools.lease(gpu=1, client=w.client, progress=False, on_granted=preempt_when_granted),
    ):
        ran.append(1)
    assert ran == []
