"""The garbage collector of a serving process: off, and a full collection when garbage may have grown.

A served process holds some 150,000 objects from its imports and its app (modules, classes, pydantic
schemas, routes), which a full collection would walk again and again: they are frozen once the app is
built. What the collector then finds in a serving process is next to nothing (tens of objects per
collection, measured with ``gc.callbacks``), while what it walks grows with the calls in flight: ten
thousand held leases keep five thousand long-polls open per worker, each with its coroutine, request,
waiter and timeout, hundreds of containers that live for the twenty seconds of a long-poll. CPython's
generational passes walked them again at every young collection (about 2 µs an object), promoted them,
and walked them again in the older generations: at 10,000 held leases a worker spent 11% of its time in
the collector, in stalls of up to 0.9 s that every call in flight waited out (heartbeat p99 1.45 s;
with the collector off, 161 ms, and the same memory).

So a serving process runs with automatic collection off, and :func:`collect_when_due` makes a full
collection from the event loop when the containers allocated and still alive since the last one pass
:data:`GROWTH_BOUND` (cyclic garbage that reference counting cannot free is in that count, so garbage
is bounded by it), and at least every :data:`MAX_INTERVAL_S`. A steady fleet allocates and frees its
calls' objects in balance and pays one full collection per interval; a growing one (a burst of new
holders) pays one per bound's worth of growth.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time

log = logging.getLogger(__name__)

GROWTH_BOUND = 1_000_000
"""Net container allocations (``gc.get_count()[0]``, what CPython's own young threshold counts) that make
a full collection due: a million containers at most (some 200 MB at 200 bytes each), held or garbage."""
MAX_INTERVAL_S = 600.0
"""Longest time between two full collections."""
CHECK_S = 1.0

_tuned = False


def tune_for_serving() -> None:
    """Freeze what exists now (never walked again) and turn automatic collection off.

    For the process that serves, once its app is built; not for a process that merely embeds the app
    (its host keeps its own collector). The served app's lifespan then runs :func:`collect_when_due`."""
    global _tuned
    gc.collect()
    gc.freeze()
    gc.disable()
    _tuned = True


def tuned_for_serving() -> bool:
    """Whether this process turned automatic collection off for serving (and so must collect itself)."""
    return _tuned


async def collect_when_due(
    growth_bound: int = GROWTH_BOUND, max_interval_s: float = MAX_INTERVAL_S, check_s: float = CHECK_S
) -> None:
    """Until cancelled, in a process tuned for serving: a full collection when the net allocations since
    the last one pass ``growth_bound``, or ``max_interval_s`` after it."""
    last = time.monotonic()
    while True:
        await asyncio.sleep(check_s)
        if gc.get_count()[0] < growth_bound and time.monotonic() - last < max_interval_s:
            continue
        started = time.perf_counter()
        found = gc.collect()
        last = time.monotonic()
        log.debug("full collection", extra={"collected": found, "seconds": round(time.perf_counter() - started, 3)})
