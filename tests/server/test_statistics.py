"""The leader gives a young PostgreSQL database the planner statistics autovacuum would give it only a
minute later, once, and only to tables nothing analyzed yet."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from respools.server.db.database import Database
from respools.server.db.migrate import upgrade
from respools.server.reconciler.statistics import EarlyStatistics
from respools.server.settings import Settings

pytestmark = pytest.mark.postgres


@pytest.fixture
def db(postgres_url_factory: Any) -> Iterator[Database]:
    database = Database(Settings(database_url=postgres_url_factory()))
    upgrade(database.write_engine)
    try:
        yield database
    finally:
        database.dispose()


def analyzed(db: Database) -> dict[str, bool]:
    """Per hot table, whether it was ever analyzed (``reltuples`` stays -1 until then)."""
    query = sa.text("SELECT relname, reltuples >= 0 FROM pg_class WHERE relname IN ('leases', 'requests')")
    return dict(db.read(lambda conn: [tuple(row) for row in conn.execute(query)]))


def analyses(db: Database, table: str) -> int:
    query = sa.text("SELECT analyze_count FROM pg_stat_user_tables WHERE relname = :t")
    return int(db.read(lambda conn: conn.execute(query, {"t": table}).scalar_one()))


def test_the_hot_tables_are_analyzed_once_the_grants_pass_the_threshold(db: Database) -> None:
    statistics = EarlyStatistics(db, grants_before=5)
    assert analyzed(db) == {"leases": False, "requests": False}
    statistics.after_cycle(3)
    statistics.after_cycle(0)
    assert analyzed(db) == {"leases": False, "requests": False}
    statistics.after_cycle(2)
    assert analyzed(db) == {"leases": True, "requests": True}


def test_tables_analyzed_already_are_left_to_autovacuum(db: Database) -> None:
    db.write(lambda tx: tx.conn.execute(sa.text("ANALYZE leases")))
    statistics = EarlyStatistics(db, grants_before=1)
    statistics.after_cycle(1)
    statistics.after_cycle(1000)
    assert analyses(db, "leases") == 1
    assert analyses(db, "requests") == 1, "analyzed once, not at every threshold"
