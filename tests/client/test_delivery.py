"""Raising in another thread, without a server: the exception lands in a busy thread and carries its
details; nothing lands once the block is disarmed, even an exception already sent; and the one-off
classes print and pickle as the public ones."""

from __future__ import annotations

import pickle
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from respools.client import LeaseLost, LeasePreempted
from respools.client.delivery import AsyncDelivery
from respools.model import PreemptReason, RequestState

DEADLINE = datetime(2030, 1, 1, tzinfo=UTC)


def busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class Worker(threading.Thread):
    """Arms a delivery, then runs ``body``; records what reached it and when."""

    def __init__(self, delivery: AsyncDelivery, body: threading.Event | float) -> None:
        super().__init__(daemon=True)
        self.delivery = delivery
        self.body = body
        self.armed = threading.Event()
        self.caught: BaseException | None = None
        self.caught_at: float | None = None
        self.finished = False

    def run(self) -> None:
        self.delivery.arm()
        self.armed.set()
        try:
            if isinstance(self.body, float):
                time.sleep(self.body)  # one C call: a delivery waits for it to return
            else:
                while not self.body.is_set():
                    busy(0.001)
            self.finished = True
        except LeaseLost as exc:
            self.caught, self.caught_at = exc, time.perf_counter()
        finally:
            self.delivery.disarm()


def test_a_busy_thread_raises_the_delivered_exception_with_its_details() -> None:
    delivery = AsyncDelivery()
    stop = threading.Event()
    worker = Worker(delivery, stop)
    worker.start()
    worker.armed.wait(5)
    notice = LeasePreempted.prepared(deadline=DEADLINE, reason=PreemptReason.PRIORITY, detail="needed by prod")
    sent = time.perf_counter()
    assert delivery.deliver(notice) is True
    worker.join(5)
    stop.set()
    assert isinstance(worker.caught, LeasePreempted) and not worker.finished
    assert worker.caught.deadline == DEADLINE and worker.caught.reason == PreemptReason.PRIORITY
    assert "needed by prod" in str(worker.caught)
    assert worker.caught_at is not None and worker.caught_at - sent < 0.5


def test_nothing_is_delivered_after_disarming() -> None:
    delivery = AsyncDelivery()
    worker = Worker(delivery, 0.01)
    worker.start()
    worker.join(5)
    assert worker.finished and delivery.deliver(LeaseLost.prepared(message="late")) is False
    busy(0.05)  # this thread must not receive it either


def test_disarming_withdraws_an_exception_sent_but_not_yet_raised() -> None:
    delivery = AsyncDelivery()
    worker = Worker(delivery, 0.4)
    worker.start()
    worker.armed.wait(5)
    time.sleep(0.05)  # the worker is inside time.sleep now
    assert delivery.deliver(LeaseLost.prepared(message="withdrawn")) is True
    delivery.disarm()
    worker.join(5)
    assert worker.finished and worker.caught is None


def test_delivering_to_oneself_is_refused() -> None:
    delivery = AsyncDelivery()
    delivery.arm()
    try:
        assert delivery.deliver(LeaseLost.prepared(message="self")) is False
    finally:
        delivery.disarm()


@pytest.mark.parametrize("public", [LeasePreempted, LeaseLost])
def test_prepared_exceptions_print_match_and_pickle_as_the_public_class(public: type[LeaseLost]) -> None:
    details = {"message": "gone"} if public is LeaseLost else {"deadline": DEADLINE, "detail": "needed"}
    exc = public.prepared(**details)()
    assert isinstance(exc, public) and type(exc) is not public
    assert type(exc).__name__ == public.__name__ and type(exc).__module__ == public.__module__
    exc.requeued = True
    copy = pickle.loads(pickle.dumps(exc))
    assert type(copy) is public and str(copy) == str(exc) and copy.requeued is True


def test_time_left_counts_down_to_the_deadline() -> None:
    notice = LeasePreempted(deadline=datetime.now(UTC) + timedelta(seconds=30))
    assert notice.time_left is not None and 28 < notice.time_left <= 30
    assert notice.state == RequestState.PREEMPTING
    assert LeasePreempted().time_left is None
