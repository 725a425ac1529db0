"""Who may run cycles.

PostgreSQL: the replica whose dedicated connection holds a session advisory lock leads, and it runs its
cycles *on that same connection*. If the process dies or the connection breaks, PostgreSQL releases the
lock and aborts any cycle in flight together, so an old leader can never commit after a new one took
over; followers retry the lock every ``election_interval_s``, so a new leader is in place within
seconds. Each cycle runs in REPEATABLE READ: one consistent snapshot for all its reads; a concurrent
change to a row it writes makes it fail with a serialization error, and it is simply run again.

SQLite: every cycle runs under ``BEGIN IMMEDIATE``, which excludes all other writers for its duration,
so each process may run cycles and they still never overlap; no election is needed.
"""

from __future__ import annotations

import logging
import random
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TypeVar

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError

from respools.server.db.database import MAX_ATTEMPTS, Database, Tx, is_retryable, utcnow
from respools.server.db.engine import postgres_single_engine

log = logging.getLogger(__name__)

T = TypeVar("T")
LEADER_LOCK_KEY = 0x7265_7370_6C65_6164  # "respllead": one fixed bigint per database


class LostLeadership(RuntimeError):
    """The leader connection broke: this replica is a follower again."""


class Leadership(ABC):
    @property
    @abstractmethod
    def is_leader(self) -> bool: ...

    @abstractmethod
    def try_acquire(self) -> bool: ...

    @abstractmethod
    def run(self, work: Callable[[Tx], T]) -> T:
        """Run one cycle's transaction; raises :class:`LostLeadership` when leadership is gone."""

    @abstractmethod
    def release(self) -> None: ...


class SqliteLeadership(Leadership):
    def __init__(self, db: Database) -> None:
        self._db = db

    @property
    def is_leader(self) -> bool:
        return True

    def try_acquire(self) -> bool:
        return True

    def run(self, work: Callable[[Tx], T]) -> T:
        return self._db.write(work)

    def release(self) -> None:
        pass


class PostgresLeadership(Leadership):
    def __init__(self, db: Database) -> None:
        self._db = db
        self._engine = postgres_single_engine(db.url, "respools-reconciler")
        self._conn: sa.Connection | None = None

    @property
    def is_leader(self) -> bool:
        return self._conn is not None

    def try_acquire(self) -> bool:
        if self._conn is not None:
            return True
        conn = self._engine.connect()
        try:
            got = bool(conn.execute(sa.text("SELECT pg_try_advisory_lock(:k)"), {"k": LEADER_LOCK_KEY}).scalar_one())
            conn.commit()
        except Exception:
            conn.close()
            raise
        if not got:
            conn.close()
            return False
        conn.execution_options(isolation_level="REPEATABLE READ")
        self._conn = conn
        return True

    def run(self, work: Callable[[Tx], T]) -> T:
        conn = self._conn
        if conn is None:
            raise LostLeadership("not the leader")
        for attempt in range(1, MAX_ATTEMPTS + 1):
            try:
                with conn.begin():
                    tx = Tx(conn=conn, now=utcnow(), is_postgres=True)
                    result = work(tx)
                self._db.announce(tx.changes)
                return result
            except DBAPIError as exc:
                if exc.connection_invalidated or conn.invalidated or conn.closed:
                    self.release()
                    raise LostLeadership(str(exc.orig)) from exc
                if not is_retryable(exc) or attempt == MAX_ATTEMPTS:
                    raise
                time.sleep(random.uniform(0, 0.002 * 2**attempt))
        raise AssertionError("unreachable")

    def release(self) -> None:
        """Close the leader connection; PostgreSQL drops the lock with it."""
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                log.debug("closing the leader connection failed", exc_info=True)

    def dispose(self) -> None:
        self.release()
        self._engine.dispose()
