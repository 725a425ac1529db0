"""Group commit on both stores: the works of a batch share one transaction, yet each one's outcome is
what it would have been alone — a work that fails takes nothing of the others down, a retry the database
asks for runs the whole batch again and commits it once, and what the batch changed is announced once.
Works of one kind are done together, and whatever goes wrong there is sorted out by running them alone."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError, OperationalError

from respools.server.changes import Changes
from respools.server.db.database import Database, Failed, Tx
from respools.server.db.group_commit import GroupCommit
from respools.server.db.joined import ALONE, Alone, Joinable, Kind, RunAlone
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


# -- works done together (respools.server.db.joined) -----------------------------------------------


@dataclass(frozen=True)
class Inserts(Kind[str, str]):
    """Inserts counters together; hands back names starting with ``alone-``."""

    calls: list[list[str]] = field(default_factory=list, compare=False, hash=False)
    fail: Exception | None = field(default=None, compare=False, hash=False)

    def together(self, tx: Tx, items: Sequence[str]) -> list[str | Alone]:
        self.calls.append(list(items))
        joined = [name for name in items if not name.startswith("alone-")]
        if joined:
            tx.conn.execute(sa.insert(COUNTERS), [{"name": name, "value": 1} for name in joined])
        if self.fail is not None:
            raise self.fail
        return [ALONE if name.startswith("alone-") else f"{name} together" for name in items]


def joinable(kind: Inserts, name: str) -> Joinable[str, str]:
    return Joinable(kind, name, insert(name))


def test_works_of_a_kind_are_done_together_and_the_rest_alone(db: Database) -> None:
    kind = Inserts()
    works: list[Callable[[Tx], str]] = [
        joinable(kind, "a"),
        insert("plain"),
        joinable(kind, "alone-b"),
        joinable(kind, "c"),
    ]
    assert db.write_batch(works) == ["a together", "plain", "alone-b", "c together"]
    assert kind.calls == [["a", "alone-b", "c"]]
    assert counters(db) == {"a": 1, "plain": 1, "alone-b": 1, "c": 1}


def test_a_kind_with_one_work_in_the_batch_runs_it_alone(db: Database) -> None:
    kind = Inserts()
    works: list[Callable[[Tx], str]] = [joinable(kind, "a"), insert("b")]
    assert db.write_batch(works) == ["a", "b"]
    assert kind.calls == []


@pytest.mark.parametrize("failure", ["database", "run-alone"])
def test_a_failure_while_done_together_runs_every_work_alone(db: Database, failure: str) -> None:
    """A constraint broken inside the set-based statements can belong to any of their works: each runs
    alone then, and only the culprit fails."""
    db.write(insert("taken"))
    fail = RunAlone("a row moved") if failure == "run-alone" else None
    kind = Inserts(fail=fail)
    works: list[Callable[[Tx], str]] = [
        joinable(kind, "a"),
        joinable(kind, "taken" if fail is None else "b"),
        joinable(kind, "c"),
    ]
    outcomes = db.write_batch(works)
    assert len(kind.calls) == 1, "done together once, then alone"
    assert outcomes[0] == "a" and outcomes[2] == "c"
    if fail is None:
        assert isinstance(outcomes[1], Failed) and isinstance(outcomes[1].error, IntegrityError)
        assert counters(db) == {"taken": 1, "a": 1, "c": 1}
    else:
        assert outcomes[1] == "b"
        assert counters(db) == {"taken": 1, "a": 1, "b": 1, "c": 1}
