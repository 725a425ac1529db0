"""One write transaction as the works inside it see it.

Its own module so that :mod:`.database` (which opens transactions and runs works in them) and
:mod:`.joined` (which runs works of one kind together inside one) both depend on it and not on each
other."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

import sqlalchemy as sa

from respools.server.changes import Changes


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(slots=True)
class Tx:
    """One write transaction: its connection, its clock reading and what it changed."""

    conn: sa.Connection
    now: datetime
    is_postgres: bool
    changes: Changes = field(default_factory=Changes)
