"""Group commit on both stores: the works of a batch share one transaction, yet each one's outcome is
what it would have been alone — a work that fails takes nothing of the others down, a retry the database
asks for runs the whole batch again and commits it once, and what the batch changed is announced once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError, OperationalError

from respools.server.changes import Changes
from respools.server.db.database import Database, Failed, Tx
from respools.server.db.group_commit import GroupCommit
from respools.server.db.migrate import upgrade
from respools.server.db.tables import COUNTERS
from respools.server.settings import Settings
from tests.server.conftest import STORES, store_url


@pytest.fixture(params=STORES)
def db(request: pytest.FixtureRequest, tmp_path: Path, postgres_url_factory: Any) -> Iterator[Database]:
    database = Database(Settings(database_url=store_url(request.param, tmp_path, postgres_url_factory)))
    upgrade(database.write_engine)
    try:
        yield database
    finally:
        database.dispose()


def insert(name: str, value: int = 1) -> Callable[[Tx], str]:
    def work(tx: Tx) -> str:
        tx.conn.execute(sa.insert(COUNTERS).values(name=name, value=value))
        tx.changes.requests.add(name)
        return name

    return work


def read(name: str) -> Callable[[Tx], int | None]:
    def work(tx: Tx) -> int | None:
        value: int | None = tx.conn.execute(sa.select(COUNTERS.c.value).where(COUNTERS.c.name == name)).scalar()
        return value

    return work


def counters(db: Database) -> dict[str, int]:
    return {row.name: row.value for row in db.read(lambda conn: list(conn.execute(sa.select(COUNTERS))))}


def published(db: Database) -> list[Changes]:
    seen: list[Changes] = []
    db.bus.subscribe(seen.append)
    return seen


def test_a_batch_commits_once_and_each_work_sees_the_ones_before(db: Database) -> None:
    announced = published(db)
    outcomes = db.write_batch([insert("a", 7), read("a"), insert("b")])
    assert outcomes == ["a", 7, "b"]
    assert counters(db) == {"a": 7, "b": 1}
    assert [c.requests for c in announced] == [{"a", "b"}]


def test_a_failing_work_fails_alone(db: Database) -> None:
    def refuses(tx: Tx) -> None:
        tx.conn.execute(sa.insert(COUNTERS).values(name="half-done", value=1))  # written, then refused
        raise ValueError("no")

    announced = published(db)
    outcomes = db.write_batch([insert("a"), refuses, insert("b"), insert("a")])
    assert outcomes[0] == "a" and outcomes[2] == "b"
    assert isinstance(outcomes[1], Failed) and isinstance(outcomes[1].error, ValueError)
    # A constraint the database enforces (on PostgreSQL the transaction is aborted by it) fails the work
    # that broke it, not the batch.
    assert isinstance(outcomes[3], Failed) and isinstance(outcomes[3].error, IntegrityError)
    assert counters(db) == {"a": 1, "b": 1}
    assert [c.requests for c in announced] == [{"a", "b"}]


def test_a_retry_runs_the_whole_batch_again_and_commits_it_once(db: Database) -> None:
    runs = {"bump": 0, "flaky": 0}

    def bump(tx: Tx) -> int:
        runs["bump"] += 1
        tx.conn.execute(sa.update(COUNTERS).where(COUNTERS.c.name == "n").values(value=COUNTERS.c.value + 1))
        return runs["bump"]

    def flaky(tx: Tx) -> str:
        runs["flaky"] += 1
        if runs["flaky"] == 1:  # what a lost SQLite lock or a PostgreSQL deadlock looks like to a caller
            raise OperationalError("UPDATE counters", {}, Exception("database is locked"))
        return "done"

    db.write(insert("n", 0))
    assert db.write_batch([bump, flaky]) == [2, "done"]
    assert counters(db)["n"] == 1


def test_write_raises_what_its_work_raised(db: Database) -> None:
    db.write(insert("a"))
    with pytest.raises(IntegrityError):
        db.write(insert("a"))
    assert counters(db) == {"a": 1}


def test_concurrent_callers_share_transactions_and_each_hears_its_own_outcome(db: Database) -> None:
    writes = GroupCommit(db)
    announced = published(db)

    def refuses(tx: Tx) -> None:
        raise LookupError("refused")

    async def main() -> list[Any]:
        works = [insert(f"c{i}") for i in range(40)]
        return await asyncio.gather(
            *(writes.write(work, durable=i % 2 == 0) for i, work in enumerate(works)),
            writes.write(refuses),
            return_exceptions=True,
        )

    try:
        # A loop of its own, on a thread of its own: an earlier test's loop may still be running here.
        with ThreadPoolExecutor(1) as thread:
            outcomes = thread.submit(asyncio.run, main()).result()
    finally:
        writes.stop()
    assert outcomes[:40] == [f"c{i}" for i in range(40)]
    assert isinstance(outcomes[40], LookupError)
    assert set(counters(db)) == {f"c{i}" for i in range(40)}
    assert 1 <= len(announced) < 40, "the queued writes were committed in batches"
    assert set().union(*(c.requests for c in announced)) == {f"c{i}" for i in range(40)}
