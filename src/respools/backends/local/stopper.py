"""Stopping a lease's workload: SIGTERM to its process group, SIGKILL to whatever outlives the grace.

The whole group is signalled because a training step is rarely one process (DataLoader workers, torchrun
ranks) and an orphaned worker keeps its GPU memory. Our own group is never signalled: a holder that did not
start its workload in a group of its own gets only its PID signalled, not the caller's siblings.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from enum import StrEnum

from respools.backends.local import procfs
from respools.backends.local.holders import Holder

log = logging.getLogger(__name__)

POLL_S = 0.05
KILL_SETTLE_S = 2.0
"""How long a killed group may take to exit before ``stop_holder`` returns anyway."""


class StopOutcome(StrEnum):
    GONE = "gone"
    """Nothing was running any more."""
    TERMINATED = "terminated"
    """It exited after SIGTERM."""
    KILLED = "killed"
    """It outlived the grace and got SIGKILL."""


def _signal(holder: Holder, group: int | None, signum: signal.Signals) -> None:
    try:
        if group is not None:
            os.killpg(group, signum)
        else:
            os.kill(holder.pid, signum)
    except ProcessLookupError:
        pass


def _alive(holder: Holder, group: int | None) -> bool:
    if group is not None:
        return next(procfs.group_members(group), None) is not None
    return procfs.running(holder.pid)


def stop_holder(
    holder: Holder,
    kill_after_s: float,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> StopOutcome:
    """Signal the holder's group (or PID), wait up to ``kill_after_s`` for it to exit, then kill it."""
    group = holder.pgid if holder.pgid is not None and holder.pgid != os.getpgrp() else None
    if not _alive(holder, group):
        return StopOutcome.GONE
    log.info("lease %s: SIGTERM to %s %d", holder.lease_id, "group" if group else "pid", group or holder.pid)
    _signal(holder, group, signal.SIGTERM)
    deadline = clock() + kill_after_s
    while clock() < deadline:
        if not _alive(holder, group):
            return StopOutcome.TERMINATED
        sleep(min(POLL_S, max(0.0, deadline - clock())))
    if not _alive(holder, group):
        return StopOutcome.TERMINATED
    log.warning("lease %s: still running %.1f s after SIGTERM; SIGKILL", holder.lease_id, kill_after_s)
    _signal(holder, group, signal.SIGKILL)
    # SIGKILL is delivered asynchronously: wait until the group has actually exited, so that KILLED
    # means its GPU memory is free, not merely that the signal was sent.
    settle = clock() + KILL_SETTLE_S
    while _alive(holder, group) and clock() < settle:
        sleep(POLL_S)
    return StopOutcome.KILLED
