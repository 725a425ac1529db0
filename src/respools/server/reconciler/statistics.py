"""Planner statistics for a young PostgreSQL database.

PostgreSQL plans a prepared statement after its first few runs and keeps that plan until the statistics
of its tables change. On a fresh database those plans are made while ``leases`` and ``requests`` are
nearly empty and have never been analyzed, so the cheapest plan for a tiny table, a sequential scan,
stays cached as the tables grow, until autovacuum's first ANALYZE a minute or more later. Meanwhile
each reconciler cycle's query for live leases reads every lease ever granted instead of the partial
index of live ones (measured: a quarter fewer lease lifecycles per second). So the leader analyzes
those tables itself once its grants pass :data:`GRANTS_BEFORE_ANALYZE`, if nothing analyzed them yet;
from then on autovacuum keeps the statistics current.
"""

from __future__ import annotations

import logging

import sqlalchemy as sa

from respools.server.db.database import Database, Tx

log = logging.getLogger(__name__)

GRANTS_BEFORE_ANALYZE = 500
"""Enough rows for statistics that tell live leases from ended ones; few enough to come within
seconds under load."""
HOT_TABLES = ("leases", "requests")

_NEVER_ANALYZED = sa.text(
    "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = current_schema() AND c.relname IN :names AND c.reltuples < 0"
).bindparams(sa.bindparam("names", expanding=True))
"""Tables never analyzed nor vacuumed (``reltuples`` is -1 until then)."""


class EarlyStatistics:
    """Counts the leader's grants and analyzes the hot tables once, when they pass the threshold."""

    def __init__(self, db: Database, grants_before: int = GRANTS_BEFORE_ANALYZE) -> None:
        self._db = db
        self._grants_before = grants_before
        self._granted = 0
        self._done = not db.is_postgres

    def after_cycle(self, grants: int) -> None:
        if self._done:
            return
        self._granted += grants
        if self._granted < self._grants_before:
            return
        self._done = True
        try:
            self._db.write(_analyze_never_analyzed, durable=False)
        except Exception as exc:  # statistics are an optimization: autovacuum will get there
            log.warning("could not analyze the hot tables", extra={"error": str(exc)})


def _analyze_never_analyzed(tx: Tx) -> None:
    names = [row[0] for row in tx.conn.execute(_NEVER_ANALYZED, {"names": list(HOT_TABLES)})]
    if names:  # our own table names, from HOT_TABLES
        tx.conn.execute(sa.text("ANALYZE " + ", ".join(names)))
        log.info("analyzed %s for the planner", ", ".join(names))
