"""Reads of single rows by id on the hot path, batched the way group commit batches writes.

Each heartbeat reads its lease and each long-poll its request: at ten thousand held leases, hundreds of
one-row reads a second, each a hop onto the thread pool, a connection checkout and a round trip. Here a
read joins a queue; while one read is in flight, the reads arriving meanwhile wait, and the next
statement (``… WHERE id IN …``) takes them all. Alone, a read waits for nobody; under load the batches
grow by themselves. A read always starts after it was asked for, so a caller that registered for news
before asking sees everything committed before the read."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Generic, TypeVar

import sqlalchemy as sa
from starlette.concurrency import run_in_threadpool

from respools.server.db.database import Database

T = TypeVar("T")
MAX_IDS = 1000
"""Ids per statement at most."""

ReadMany = Callable[[sa.Connection, list[str]], dict[str, T]]


class BatchedReads(Generic[T]):
    """One in-flight read at a time of the rows asked for by id (see the module's docstring)."""

    def __init__(self, db: Database, read_many: ReadMany[T]) -> None:
        self._db = db
        self._read_many = read_many
        self._wanted: dict[str, list[asyncio.Future[T | None]]] = {}
        self._reading = False
        self._task: asyncio.Task[None] | None = None

    async def get(self, row_id: str) -> T | None:
        """The row ``row_id`` as read after this call began; ``None`` when there is none."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T | None] = loop.create_future()
        self._wanted.setdefault(row_id, []).append(future)
        if not self._reading:
            self._reading = True
            self._task = loop.create_task(self._read_wanted())
        return await future

    async def _read_wanted(self) -> None:
        try:
            while self._wanted:
                ids = list(self._wanted)[:MAX_IDS]
                wanted = {row_id: self._wanted.pop(row_id) for row_id in ids}
                try:
                    found = await run_in_threadpool(self._db.read, lambda conn, ids=ids: self._read_many(conn, ids))
                except Exception as exc:  # every caller of the batch hears of it
                    for futures in wanted.values():
                        for future in futures:
                            if not future.done():
                                future.set_exception(exc)
                    continue
                for row_id, futures in wanted.items():
                    for future in futures:
                        if not future.done():
                            future.set_result(found.get(row_id))
        finally:
            self._reading = False
