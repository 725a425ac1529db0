"""Requeue-on-preemption, client side: run the step again once its request is back at its place in the
queue, as many times as the server requeues it (``max_retries``), pausing a little longer each time so a
step that is preempted over and over does not thrash its checkpoint storage."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from respools.client.errors import LeaseLost
from respools.client.session import LeaseSession

log = logging.getLogger("respools.client")

T = TypeVar("T")


@dataclass(frozen=True)
class Backoff:
    """Pause before attempt ``n`` (1 for the first rerun): ``base_s · 2^(n-1)``, at most ``max_s``. The
    request keeps its place in the queue meanwhile; the pause only delays the rerun's start."""

    base_s: float = 1.0
    max_s: float = 30.0

    def delay(self, attempt: int) -> float:
        if attempt <= 0 or self.base_s <= 0:
            return 0.0
        return float(min(self.max_s, self.base_s * 2 ** (attempt - 1)))


def run_with_retries(session: LeaseSession, body: Callable[[], T], backoff: Backoff | None = None) -> T:
    """``body()`` inside ``session``; after a preemption that requeued the request, again. Raises the last
    :class:`LeaseLost` / :class:`LeasePreempted` once the server stops requeueing."""
    backoff = backoff or Backoff()
    try:
        while True:
            try:
                with session:
                    return body()
            except LeaseLost as exc:
                if not exc.requeued or exc.next_attempt is None:
                    raise
                pause = backoff.delay(exc.next_attempt)
                log.warning("respools: %s; running again (attempt %d) in %.1f s", exc, exc.next_attempt + 1, pause)
                time.sleep(pause)
    finally:
        session.cancel()  # a requeued request nobody reruns (Ctrl-C during the pause) leaves the queue
