"""PostgreSQL write transactions begin with one message sent straight to psycopg: a BEGIN that fails
must end as SQLAlchemy's own would — a lost connection invalidated (and the write retried on a fresh
one), any other error rolled back, never a connection returned to the pool inside a transaction."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from psycopg.pq import TransactionStatus
from sqlalchemy.exc import DBAPIError

from respools.server.db import engine as engine_module
from respools.server.db.database import Database, Tx, is_retryable
from respools.server.db.engine import LAZY_COMMIT, postgres_engine
from respools.server.settings import Settings
from tests.server import pg

pytestmark = pytest.mark.postgres


@pytest.fixture
def url(postgres_url_factory: Any) -> str:
    return Settings(database_url=postgres_url_factory()).database_url  # with its driver named


@pytest.fixture
def engine(url: str) -> Iterator[sa.Engine]:
    engine = postgres_engine(url, autocommit=False, pool_size=1, max_overflow=0)
    yield engine
    engine.dispose()


def _terminate(backend_pid: int) -> None:
    with psycopg.connect(pg.ADMIN_DSN, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (backend_pid,))


def _backend_pid(conn: sa.Connection) -> int:
    pid: int = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
    return pid


@pytest.mark.parametrize("lazy", [False, True], ids=["durable", "lazy"])
def test_a_begin_on_a_lost_connection_invalidates_it(engine: sa.Engine, lazy: bool) -> None:
    with engine.connect() as conn:
        conn.execution_options(**{LAZY_COMMIT: lazy})
        pid = _backend_pid(conn)
        conn.commit()
        _terminate(pid)
        with pytest.raises(DBAPIError) as raised:
            conn.begin()
        assert raised.value.connection_invalidated
        assert is_retryable(raised.value)
        assert conn.invalidated
    with engine.connect() as conn, conn.begin():
        assert _backend_pid(conn) != pid  # the pool replaced the lost connection


def test_a_failed_begin_leaves_no_transaction_open(engine: sa.Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_module, "_BEGIN", "BEGIN; SET LOCAL no_such_setting TO 1")
    with engine.connect() as conn:
        with pytest.raises(DBAPIError, match="no_such_setting") as raised:
            conn.begin()
        assert not raised.value.connection_invalidated
        dbapi_conn = conn.connection.dbapi_connection
        assert isinstance(dbapi_conn, psycopg.Connection)
        assert dbapi_conn.info.transaction_status == TransactionStatus.IDLE


def test_a_write_whose_connection_was_lost_is_retried(url: str) -> None:
    db = Database(Settings(database_url=url, db_pool_size=1, db_max_overflow=0))
    try:
        pid = db.write(lambda tx: _backend_pid(tx.conn))
        _terminate(pid)

        def work(tx: Tx) -> int:
            return _backend_pid(tx.conn)

        assert db.write(work, durable=False) != pid
    finally:
        db.dispose()
