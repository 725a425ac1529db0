"""Transactions with retries and change notification.

Every write goes through :meth:`Database.write`: the work runs in one transaction, is retried when the
database asks for it (serialization failure, deadlock, a connection that died, SQLite busy), and what it
changed is announced after the commit — in-process through the :class:`ChangeBus`, across replicas by a
``NOTIFY`` sent inside the transaction, so that listeners hear of it exactly when it becomes visible.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError, OperationalError

from respools.server.changes import ChangeBus, Changes
from respools.server.db.engine import LAZY_COMMIT, postgres_engine, sqlite_engine
from respools.server.db.joined import RunAlone, run_joined
from respools.server.db.notifier import Notifier
from respools.server.db.transaction import Tx, utcnow
from respools.server.settings import Settings

__all__ = ["Database", "DatabaseUnavailable", "Failed", "Tx", "utcnow"]

log = logging.getLogger(__name__)

T = TypeVar("T")
RETRYABLE_SQLSTATES = frozenset({"40001", "40P01"})  # serialization failure, deadlock detected
MAX_ATTEMPTS = 6
JOINED = -1
"""Where a batch is while its kinds run together (see :mod:`.joined`), in place of a work's index."""


_unit = threading.local()
"""The transaction of the unit of work this thread is in, if any (``Database.write_unit``)."""


class DatabaseUnavailable(RuntimeError):
    """The database could not be reached or kept failing; the API answers 503."""


@dataclass(frozen=True, slots=True)
class Failed:
    """The outcome of a work in a batch that raised ``error``."""

    error: Exception


def _without_failed(
    todo: list[int], current: int | None, failure: Failed, outcomes: dict[int, T | Failed]
) -> list[int]:
    """``todo`` after ``failure``: only the work ``current`` failed, or every one left when ``None``."""
    failed = todo if current is None else [current]
    for index in failed:
        outcomes[index] = failure
    return [index for index in todo if index not in failed]


def is_retryable(exc: DBAPIError) -> bool:
    if exc.connection_invalidated:
        return True
    sqlstate = getattr(exc.orig, "sqlstate", None)
    if sqlstate in RETRYABLE_SQLSTATES:
        return True
    message = str(exc.orig).lower()
    return "database is locked" in message or "database table is locked" in message


class Database:
    """The engines of one process and the transaction discipline around them."""

    def __init__(self, settings: Settings, bus: ChangeBus | None = None) -> None:
        self.settings = settings
        self.url = settings.database_url
        self.is_postgres = settings.is_postgres
        self.bus = bus or ChangeBus()
        if self.is_postgres:
            size, overflow = settings.db_pool_size, settings.db_max_overflow
            self.write_engine = postgres_engine(self.url, autocommit=False, pool_size=size, max_overflow=overflow)
            self.read_engine = postgres_engine(self.url, autocommit=True, pool_size=size, max_overflow=overflow)
            self._notifier: Notifier | None = Notifier(self.url)
        else:
            self.write_engine = sqlite_engine(self.url, immediate=True)
            self.read_engine = sqlite_engine(self.url, immediate=False)
            self._notifier = None  # one process per SQLite file: the in-process bus reaches everyone
        # SQLite writers of one process queue on this lock rather than in SQLite's busy handler, which
        # sleeps in coarse steps; other processes on the same file still wait on the busy timeout.
        self._local_write_lock: threading.Lock | None = None if self.is_postgres else threading.Lock()

    @contextmanager
    def _serialized(self) -> Iterator[None]:
        if self._local_write_lock is None:
            yield
            return
        with self._local_write_lock:
            yield

    def write(self, work: Callable[[Tx], T], *, durable: bool = True) -> T:
        """Run ``work`` in one transaction, retrying it whole when the database asks for a retry.

        ``durable=False`` lets PostgreSQL acknowledge the commit before its WAL reaches the disk (it saves
        an fsync, ~4 ms here). Only for changes whose loss in a *database* crash errs on the safe side —
        a heartbeat, a release: the lease would look alive a little longer and then expire. A grant never
        relies on such a change being lost: the grant's own durable commit flushes all WAL before it."""
        enclosing: Tx | None = getattr(_unit, "tx", None)
        if enclosing is not None:
            return work(enclosing)  # part of a unit of work: its transaction commits or rolls back whole
        (outcome,) = self.write_batch([work], durable=durable)
        if isinstance(outcome, Failed):
            raise outcome.error
        return outcome

    def write_unit(self, work: Callable[[Tx], T]) -> T:
        """Run ``work`` in one transaction in which every :meth:`write` it makes, directly or through
        the ``ops`` functions, joins that transaction: all of it commits, or none of it (a raise rolls
        it all back). Atomic multi-object changes (``respools apply``) are made of the same single-object
        operations as the API's own routes."""

        def unit(tx: Tx) -> T:
            _unit.tx = tx
            try:
                return work(tx)
            finally:
                _unit.tx = None

        return self.write(unit)

    def write_batch(self, works: Sequence[Callable[[Tx], T]], *, durable: bool = True) -> list[T | Failed]:
        """Run several callers' ``works`` in one transaction and one commit (group commit).

        The outcome of each is what it returned or, as :class:`Failed`, what it raised. Works of a
        :class:`~respools.server.db.joined.Kind` are done together first (see :mod:`.joined`), the rest
        in order. A work that raises takes nothing of the others down: the transaction is rolled back and
        run again without it, so the commit holds exactly the works that succeeded, as if each had run
        alone, one after the other. A retry the database asks for runs the whole batch again; a failure
        while kinds run together runs the batch again with every work alone, which finds the culprit."""
        outcomes: dict[int, T | Failed] = {}
        todo = list(range(len(works)))
        attempt = 0
        join = True
        while todo:
            attempt += 1
            current: int | None = None
            try:
                with self._serialized(), self.write_engine.connect() as conn:
                    if not durable and self.is_postgres:
                        conn.execution_options(**{LAZY_COMMIT: True})  # see engine._begin_in_one_round_trip
                    with conn.begin():
                        tx = Tx(conn=conn, now=utcnow(), is_postgres=self.is_postgres)
                        results: dict[int, T] = {}
                        alone = todo
                        if join:
                            current = JOINED
                            results, alone = run_joined(tx, works, todo)
                        for current in alone:
                            results[current] = works[current](tx)
                        current = None  # a failure from here on is the commit's, not one work's
                outcomes.update(results)
                self.announce(tx.changes)
                todo = []
            except DBAPIError as exc:
                if is_retryable(exc) and attempt < MAX_ATTEMPTS:
                    time.sleep(random.uniform(0, 0.002 * 2**attempt))
                    continue
                if current == JOINED:
                    join = False
                    continue
                error: Exception = exc
                if exc.connection_invalidated or isinstance(exc, OperationalError):
                    error = DatabaseUnavailable(str(exc.orig))
                    error.__cause__ = exc
                    current = None  # the database failed, not the work: every work left gets the error
                todo = _without_failed(todo, current, Failed(error), outcomes)
            except Exception as exc:  # a work refused (an ApiError) or broke: it alone fails
                if current == JOINED:
                    if not isinstance(exc, RunAlone):
                        log.exception("works done together failed; running each alone")
                    join = False
                    continue
                if current is None:
                    raise
                todo = _without_failed(todo, current, Failed(exc), outcomes)
        return [outcomes[i] for i in range(len(works))]

    def announce(self, changes: Changes) -> None:
        """Tell this process (the bus) and the other replicas (NOTIFY, after the commit) what changed."""
        self.bus.publish(changes)
        if self._notifier is not None:
            self._notifier.send(changes)

    def read(self, work: Callable[[sa.Connection], T]) -> T:
        """Run read-only ``work``; on PostgreSQL each statement sees the latest commits."""
        for attempt in range(1, 4):
            try:
                with self.read_engine.connect() as conn:
                    return work(conn)
            except DBAPIError as exc:
                if not is_retryable(exc) or attempt == 3:
                    if exc.connection_invalidated or isinstance(exc, OperationalError):
                        raise DatabaseUnavailable(str(exc.orig)) from exc
                    raise
        raise AssertionError("unreachable")

    def ping(self) -> bool:
        try:
            self.read(lambda conn: conn.execute(sa.text("SELECT 1")).scalar_one())
        except (DatabaseUnavailable, DBAPIError):
            return False
        return True

    def dispose(self) -> None:
        if self._notifier is not None:
            self._notifier.close()
        self.write_engine.dispose()
        self.read_engine.dispose()
