"""Cross-replica change notifications, sent after the commit that made the change.

A ``NOTIFY`` inside the writing transaction would serialize every writer of the database: PostgreSQL's
``PreCommit_Notify`` takes a database-wide lock and holds it until the commit record is flushed, so
notifying commits queue behind each other's fsync (measured: ~60 lease lifecycles/s, whatever the number
of clients). Instead each process sends its news from one connection of its own, in autocommit with
``synchronous_commit=off`` (a notification needs no durability: a lost one costs a reconciler tick),
coalescing whatever piled up while the previous one was in flight. Listeners re-read the store when
notified, so a notification that follows its commit shows them everything it announces."""

from __future__ import annotations

import logging
import threading

import sqlalchemy as sa

from respools.server.changes import CHANNEL, Changes, encode
from respools.server.db.engine import postgres_single_engine

log = logging.getLogger(__name__)


def notify(conn: sa.Connection, changes: Changes) -> None:
    """Send ``changes`` as NOTIFY messages on ``conn`` (delivered when its transaction commits)."""
    payloads = encode(changes)
    calls = ", ".join(f"pg_notify(:channel, :p{i})" for i in range(len(payloads)))
    params: dict[str, str] = {"channel": CHANNEL} | {f"p{i}": p for i, p in enumerate(payloads)}
    conn.execute(sa.text(f"SELECT {calls}"), params)


class Notifier:
    """A thread that sends what :meth:`send` hands it, merged, one notification at a time."""

    def __init__(self, url: str) -> None:
        self._engine = postgres_single_engine(url, "respools-notifier")
        self._pending = Changes()
        self._ready = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="respools-notifier", daemon=True)
        self._thread.start()

    def send(self, changes: Changes) -> None:
        if not changes:
            return
        with self._ready:
            self._pending.merge(changes)
            self._ready.notify()

    def close(self, timeout: float = 5.0) -> None:
        """Send what is pending, then stop."""
        with self._ready:
            self._closed = True
            self._ready.notify()
        self._thread.join(timeout)
        self._engine.dispose()

    def _take(self) -> Changes | None:
        with self._ready:
            while not self._pending and not self._closed:
                self._ready.wait()
            if not self._pending:
                return None
            taken, self._pending = self._pending, Changes()
            return taken

    def _run(self) -> None:
        conn: sa.Connection | None = None
        while (changes := self._take()) is not None:
            try:
                if conn is None:
                    conn = self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")
                    conn.exec_driver_sql("SET synchronous_commit TO OFF")
                notify(conn, changes)
            except sa.exc.DBAPIError as exc:
                # Lost: the other replicas catch up on their next tick, and long-polls re-read then.
                log.warning("could not notify other replicas (%s); they catch up on their next tick", exc.orig)
                if conn is not None:
                    conn.invalidate()
                    conn = None
        if conn is not None:
            conn.close()
