"""Scratch PostgreSQL databases for tests: each gets its own uniquely named database on the server at
127.0.0.1:5432 (other engineers' tests run against the same server at the same time) and drops it."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg import sql

ADMIN_DSN = os.environ.get("RESPOOLS_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")


def unreachable_reason() -> str | None:
    """Why PostgreSQL cannot be used, or ``None`` when it can."""
    try:
        with psycopg.connect(ADMIN_DSN, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"PostgreSQL at {ADMIN_DSN} is unreachable ({str(exc).strip().splitlines()[0]}); run .ci/run to start it"
    return None


def _url_for(name: str) -> str:
    base, _, _ = ADMIN_DSN.rpartition("/")
    return f"{base}/{name}"


def create_database(prefix: str = "respools_test") -> tuple[str, str]:
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return name, _url_for(name)


def drop_database(name: str) -> None:
    with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        )
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))


@contextmanager
def scratch_database(prefix: str = "respools_test") -> Iterator[str]:
    """A fresh database's URL, dropped afterwards."""
    name, url = create_database(prefix)
    try:
        yield url
    finally:
        drop_database(name)


def libpq(url: str) -> str:
    """A SQLAlchemy-style URL as plain libpq (psycopg) connection string."""
    return url.replace("postgresql+psycopg://", "postgresql://")
