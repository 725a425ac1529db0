"""The usage ledger's sums computed inside PostgreSQL: the same arithmetic as :func:`usage.aggregate`,
as one query, so a month of a busy fleet is summed where the rows are instead of being shipped to Python.

Measured with ``benchmarks/usage_query.py``: on 1M lease rows, reading and summing the rows in Python
took tens of seconds per query (and the Prometheus scrape, which covers the whole history, the most);
here the database cuts each lease at the bucket boundaries (``generate_series``), expands its resource
vector (``jsonb_each_text``) and sums. The answer is still a function of committed rows only, so every
replica gives the same figures. SQLite keeps the Python path (:mod:`usage`); the tests of ``GET
/v1/usage`` run the same exact-number cases on both stores.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from respools.server.usage import Dimension, Totals, aggregate, intervals

_QUERY = """
WITH spans AS (
    SELECT id, subject, pool, resources, borrowed, state = 'preempted' AS preempted,
           greatest(granted_at, CAST(:since AS timestamptz)) AS s,
           least(coalesce(released_at, CAST(:now AS timestamptz)), CAST(:until AS timestamptz)) AS e,
           greatest(granted_at, checkpointed_at, CAST(:since AS timestamptz)) AS lost_from
    FROM leases
    WHERE granted_at < :until AND (released_at IS NULL OR released_at > :since) {subject_filter}
), pieces AS (
    {pieces}
), alike AS (
    -- leases of one group holding the same vectors add up their seconds first (exact: numeric), so
    -- the vectors are expanded once per group and vector rather than once per lease
    SELECT subject, pool, bucket, resources, borrowed,
           sum(secs) AS secs,
           sum(CASE WHEN preempted THEN secs ELSE 0 END) AS preempted_secs,
           sum(CASE WHEN preempted THEN lost_secs ELSE 0 END) AS lost_secs,
           count(*) AS leases
    FROM pieces
    GROUP BY subject, pool, bucket, resources, borrowed
)
SELECT subject, pool, bucket, k.key AS key,
       sum(k.value::numeric * secs) AS total,
       sum(coalesce((borrowed ->> k.key)::numeric, 0) * secs) AS borrowed,
       sum(k.value::numeric * preempted_secs) AS preempted,
       sum(k.value::numeric * lost_secs) AS lost,
       sum(leases) AS leases
FROM alike
CROSS JOIN LATERAL jsonb_each_text(resources || jsonb_build_object(CAST(:count_key AS text), 0)) AS k(key, value)
GROUP BY subject, pool, bucket, k.key
"""
_WHOLE = """
    SELECT id, subject, pool, resources, borrowed, preempted, NULL::timestamptz AS bucket,
           extract(epoch FROM e - s) AS secs,
           greatest(0, extract(epoch FROM e - greatest(lost_from, s))) AS lost_secs
    FROM spans WHERE e > s
"""
_BUCKETED = """
    SELECT id, subject, pool, resources, borrowed, preempted, b AS bucket,
           extract(epoch FROM least(e, b_end) - greatest(s, b)) AS secs,
           greatest(0, extract(epoch FROM least(e, b_end) - greatest(lost_from, s, b))) AS lost_secs
    FROM spans
    CROSS JOIN LATERAL generate_series(
        date_trunc(CAST(:unit AS text), s, 'UTC'), e, CAST(:width AS interval)) AS b
    CROSS JOIN LATERAL (SELECT b + CAST(:width AS interval) AS b_end) AS bucket_end
    WHERE e > s AND b < e
"""


COUNT_KEY = "#leases"
"""A key added (with amount 0) to every lease's vector, so one group row per lease counts the leases
whatever keys they hold; no pool key can have this name."""


def supported(conn: sa.Connection) -> bool:
    return conn.dialect.name == "postgresql"


def usage_totals(
    conn: sa.Connection,
    since: datetime,
    until: datetime,
    now: datetime,
    subject: str | None,
    by: Sequence[Dimension],
) -> dict[tuple[Any, ...], Totals]:
    """The ledger's sums over ``[since, until)`` grouped by ``by``: in the database on PostgreSQL, in
    Python elsewhere (see the module's docstring); the same figures either way."""
    if supported(conn):
        return aggregate_in_database(conn, since, until, now, subject, by)
    return aggregate(intervals(conn, since, until, now, subject), since, until, by)


def aggregate_in_database(
    conn: sa.Connection,
    since: datetime,
    until: datetime,
    now: datetime,
    subject: str | None,
    by: Sequence[Dimension],
) -> dict[tuple[Any, ...], Totals]:
    """What ``aggregate(intervals(conn, since, until, now, subject), since, until, by)`` answers."""
    unit = "hour" if Dimension.HOUR in by else "day" if Dimension.DAY in by else None
    params: dict[str, Any] = {"since": since, "until": until, "now": now, "count_key": COUNT_KEY}
    if unit is not None:
        params |= {"unit": unit, "width": f"1 {unit}"}
    if subject is not None:
        params["subject"] = subject
    text = _QUERY.format(
        subject_filter="AND subject = :subject" if subject is not None else "",
        pieces=_BUCKETED if unit is not None else _WHOLE,
    )
    groups: dict[tuple[Any, ...], Totals] = {}
    # The planner cannot see how few buckets a lease spans (generate_series) and estimates millions of
    # rows; it would then JIT-compile the query, which took seconds of the 5 s it measured at 100k leases.
    conn.execute(sa.text("SET LOCAL jit = off"))
    for row in conn.execute(sa.text(text), params):
        bucket = row.bucket.astimezone(UTC) if row.bucket is not None else None
        parts = {
            Dimension.SUBJECT: row.subject,
            Dimension.POOL: row.pool,
            Dimension.DAY: bucket,
            Dimension.HOUR: bucket,
        }
        totals = groups.setdefault(tuple(parts[d] for d in by), Totals())
        if row.key == COUNT_KEY:  # one row per lease and bucket carries this key: its count is theirs
            totals.leases += int(row.leases)
            continue
        total, borrowed = float(row.total), float(row.borrowed)
        totals.in_share[row.key] = totals.in_share.get(row.key, 0.0) + total - borrowed
        if borrowed:
            totals.borrowed[row.key] = totals.borrowed.get(row.key, 0.0) + borrowed
        if row.preempted:
            totals.preempted[row.key] = totals.preempted.get(row.key, 0.0) + float(row.preempted)
        if row.lost:
            totals.lost[row.key] = totals.lost.get(row.key, 0.0) + float(row.lost)
    return groups
