"""Engine factories for the two supported databases.

On PostgreSQL reads run in autocommit (one round trip per query, no BEGIN/ROLLBACK) and writes in READ
COMMITTED transactions that lock the rows they change, each begun by one message that carries its
settings. On SQLite every write transaction starts with ``BEGIN IMMEDIATE`` so that writers queue on
the database lock instead of failing halfway with "database is locked", and reads run in a deferred
transaction, which in WAL mode is a consistent snapshot.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

SQLITE_BUSY_TIMEOUT_MS = 15_000
_PG_KEEPALIVES = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5, "keepalives_count": 3}
SHORT_KEEPALIVES: dict[str, Any] = {
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 3,
}
"""For the long-lived connections (leader, listener, notifier): a dead peer is noticed within seconds."""


def sqlite_engine(url: str, *, immediate: bool) -> sa.Engine:
    path = make_url(url).database
    if path:
        Path(path).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = sa.create_engine(
        url,
        connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
        pool_size=8,
        max_overflow=32,
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves (see _on_begin)
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


LAZY_COMMIT = "respools_lazy_commit"
"""Execution option of a write connection: begin its transaction with ``synchronous_commit`` off."""
_BEGIN = "BEGIN"
_BEGIN_LAZY = "BEGIN; SET LOCAL synchronous_commit TO OFF"


def postgres_engine(url: str, *, autocommit: bool, pool_size: int, max_overflow: int) -> sa.Engine:
    """An engine of pooled connections: in autocommit for reads; for writes, transactions that this
    module begins itself (see :func:`_begin_in_one_round_trip`)."""
    options: dict[str, Any] = {
        "pool_size": pool_size,
        "max_overflow": max_overflow,
        "pool_recycle": 1800,
        # Every use ends in an explicit commit or rollback (or runs in autocommit), so the pool's
        # customary ROLLBACK on check-in would only cost a round trip per transaction.
        "pool_reset_on_return": None,
        "connect_args": {"application_name": "respools", **_PG_KEEPALIVES},
    }
    if autocommit:
        options["isolation_level"] = "AUTOCOMMIT"
    engine = sa.create_engine(url, **options)
    if not autocommit:
        _begin_in_one_round_trip(engine)
    return engine


def _begin_in_one_round_trip(engine: sa.Engine) -> None:
    """Begin write transactions with one message, settings included.

    psycopg begins a transaction with a ``BEGIN`` of its own, one round trip, and a ``SET LOCAL`` after it
    costs another; a lease's heartbeat and release have only three or four statements besides. So the
    driver runs in autocommit and SQLAlchemy's ``begin`` sends ``BEGIN`` (and for a connection with
    :data:`LAZY_COMMIT`, ``SET LOCAL synchronous_commit TO OFF``) as one simple query. psycopg's
    ``commit()`` and ``rollback()`` end whatever transaction is open, autocommit or not.

    The query goes straight to the psycopg connection: through ``exec_driver_sql`` it cost about 60 µs
    more CPU (an execution context, cursor events, a result), on every write transaction. A failure is
    handed to SQLAlchemy's own handler, as a failed ``BEGIN`` of its own would be: a lost connection is
    invalidated and surfaces as a retryable ``DBAPIError``, any other error rolls back and is wrapped."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.autocommit = True

    @event.listens_for(engine, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        statement = _BEGIN_LAZY if conn.get_execution_options().get(LAZY_COMMIT, False) else _BEGIN
        try:
            conn.connection.dbapi_connection.execute(statement)  # type: ignore[union-attr]
        except BaseException as exc:  # as Connection._begin_impl catches around a dialect's own BEGIN
            conn._handle_dbapi_exception(exc, statement, None, None, None)  # always raises


def postgres_single_engine(url: str, application_name: str) -> sa.Engine:
    """A pool-less engine for a long-lived connection (the reconciler's leader connection), with short
    keepalives so that a dead peer is noticed within seconds."""
    return sa.create_engine(
        url,
        poolclass=NullPool,
        connect_args={"application_name": application_name, **SHORT_KEEPALIVES},
    )


def libpq_url(url: str) -> str:
    """The SQLAlchemy URL of a PostgreSQL database as a plain libpq URI (for raw psycopg connections)."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
