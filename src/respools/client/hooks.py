"""Lifecycle hooks: plain callables the caller passes to ``respools.lease(...)``.

A hook observes; it cannot veto. One that raises is logged and the lease carries on, because a broken
metrics call must not turn a release into a leaked lease or a preemption notice into a crash.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

log = logging.getLogger("respools.client")

T = TypeVar("T")


@dataclass(frozen=True)
class Hooks(Generic[T]):
    """Each hook gets the lease session (``T``).

    ``on_granted``: the lease is active and its environment set, just before the block runs (the step's
    thread). ``on_preempted``: notice arrived — called from the heartbeat thread right after the exception
    was sent to the step, so keep it short. ``on_requeued``: the request is back in the queue for another
    attempt (the step's thread, after the release). ``on_released``: the lease was given back, whatever
    the reason (the step's thread)."""

    on_granted: Callable[[T], object] | None = None
    on_preempted: Callable[[T], object] | None = None
    on_requeued: Callable[[T], object] | None = None
    on_released: Callable[[T], object] | None = None

    def call(self, name: str, subject: T) -> None:
        hook: Callable[[T], object] | None = getattr(self, name)
        if hook is None:
            return
        try:
            hook(subject)
        except Exception:
            log.exception("respools: the %s hook %r raised; carrying on", name, hook)
