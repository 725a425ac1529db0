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

import psycopg

from respools.server.changes import CHANNEL, Changes, encode
from respools.server.db.engine import SHORT_KEEPALIVES, libpq_url

log = logging.getLogger(__name__)

_NOTIFY = "SELECT pg_notify(%s, %s)"


def notify(conn: psycopg.Connection, changes: Changes) -> None:
    """Send ``changes`` as NOTIFY messages on ``conn`` (an autocommit connection: sent at once).

    A plain psycopg connection, not SQLAlchemy: this runs after nearly every commit, and building and
    compiling a statement per call cost more than the notification itself."""
    payloads = encode(changes)
    if len(payloads) == 1:
        conn.execute(_NOTIFY, (CHANNEL, payloads[0]))
        return
    with conn.cursor() as cursor:
        cursor.executemany(_NOTIFY, [(CHANNEL, payload) for payload in payloads])


class Notifier:
    """A thread that sends what :meth:`send` hands it, merged, one notification at a time."""

    def __init__(self, url: str) -> None:
        self._conninfo = libpq_url(url)
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

    def _take(self) -> Changes | None:
        with self._ready:
            while not self._pending and not self._closed:
                self._ready.wait()
            if not self._pending:
                return None
            taken, self._pending = self._pending, Changes()
            return taken

    def _connect(self) -> psycopg.Connection:
        return psycopg.connect(
            self._conninfo,
            autocommit=True,
            application_name="respools-notifier",
            options="-c synchronous_commit=off",
            **SHORT_KEEPALIVES,
        )

    def _run(self) -> None:
        conn: psycopg.Connection | None = None
        while (changes := self._take()) is not None:
            try:
                if conn is None:
                    conn = self._connect()
                notify(conn, changes)
            except psycopg.Error as exc:
                # Lost: the other replicas catch up on their next tick, and long-polls re-read then.
                log.warning("could not notify other replicas (%s); they catch up on their next tick", exc)
                if conn is not None:
                    conn.close()
                    conn = None
        if conn is not None:
            conn.close()
