"""Group commit: the writes of many concurrent API calls share one transaction and one commit.

A lease's lifecycle is a handful of tiny write transactions (submit, heartbeat, release), and each of
them paid alone for a hop onto the thread pool, a connection checkout, ``BEGIN`` and ``COMMIT``. Here an
``async`` handler hands its work to one writer thread per process and awaits the outcome; the thread
takes every work that queued up while it was busy and runs them all through
:meth:`Database.write_batch` — one transaction, one commit, one notification. Under load the batches
grow by themselves; alone, a work waits for nobody.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from respools.server.db.database import Database, Failed, Tx

log = logging.getLogger(__name__)

T = TypeVar("T")
MAX_BATCH = 128
"""Works per transaction at most: a batch holds its rows locked until its commit."""


@dataclass(slots=True)
class _Job:
    work: Callable[[Tx], Any]
    durable: bool
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]


class GroupCommit:
    """One writer thread that commits queued works in batches (see the module's docstring)."""

    def __init__(self, db: Database, max_batch: int = MAX_BATCH) -> None:
        self.db = db
        self._max_batch = max_batch
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        """Works to commit; ``None`` asks the thread to end."""
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    async def write(self, work: Callable[[Tx], T], *, durable: bool = True) -> T:
        """What ``work`` returned once its batch committed; what it raised, if it raised.

        ``durable`` as for :meth:`Database.write`; a batch is durable when any of its works asks."""
        self._ensure_started()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue.put(_Job(work, durable, loop, future))
        return await future

    def stop(self, timeout: float = 10.0) -> None:
        """Finish the works queued so far, then end the thread."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(None)
            thread.join(timeout)

    def _ensure_started(self) -> None:
        if self._thread is not None:
            return
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="respools-group-commit", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            stopping = False
            while len(batch) < self._max_batch:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stopping = True
                    break
                batch.append(item)
            self._commit(batch)
            if stopping:
                return

    def _commit(self, jobs: list[_Job]) -> None:
        durable = any(job.durable for job in jobs)
        try:
            outcomes: list[Any] = self.db.write_batch([job.work for job in jobs], durable=durable)
        except Exception as exc:  # whatever broke, every waiter must hear of it, and the thread goes on
            log.exception("group commit failed")
            outcomes = [Failed(exc)] * len(jobs)
        by_loop: defaultdict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], Any]]] = defaultdict(list)
        for job, outcome in zip(jobs, outcomes, strict=True):
            by_loop[job.loop].append((job.future, outcome))
        for loop, settled in by_loop.items():  # one wake-up of each waiting loop per batch
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody is waiting any more
                loop.call_soon_threadsafe(_settle, settled)


def _settle(settled: list[tuple[asyncio.Future[Any], Any]]) -> None:
    for future, outcome in settled:
        if future.done():  # the caller went away (its request was cancelled)
            continue
        if isinstance(outcome, Failed):
            future.set_exception(outcome.error)
        else:
            future.set_result(outcome)
