"""The usage roll-up answers what the lease rows answer: on random histories, whatever part of them is
rolled up (none, some, all), for aligned and ragged windows and every grouping, to the last digit; a
batch that fails leaves nothing behind; two replicas rolling up at once count every lease once; and the
leader rolls up a real released lease by itself."""

from __future__ import annotations

import random
import threading
import time
import uuid
import warnings
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from respools.server.db.database import Database, Tx
from respools.server.db.migrate import upgrade
from respools.server.db.tables import LEASES, USAGE_ROLLUP
from respools.server.usage import Dimension, Totals, aggregate, intervals
from respools.server.usage_query import usage_totals
from respools.server.usage_rollup import ROLLED_LONG, catch_up, roll_up
from tests.server.conftest import STORES, Api, settings_for, store_url

with warnings.catch_warnings():  # as in conftest: starlette nudges towards httpx2
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from respools.server import create_app

NOW = datetime(2026, 3, 10, 9, 41, 17, 123456, tzinfo=UTC)
GROUPINGS: tuple[list[str], ...] = (
    ["subject", "pool"],
    ["subject", "day"],
    ["pool", "hour"],
    ["subject", "pool", "day"],
    ["subject"],
    [],
)
WINDOWS = (
    (NOW - timedelta(days=6, hours=3, minutes=7, seconds=1.5), NOW - timedelta(minutes=3)),  # ragged both ends
    (datetime(2026, 3, 5, tzinfo=UTC), datetime(2026, 3, 9, tzinfo=UTC)),  # whole days
    (datetime(2026, 3, 8, 13, tzinfo=UTC), NOW),  # whole hours, then the live end
    (NOW - timedelta(hours=1, minutes=30), NOW),  # shorter than two hours
    (datetime(2026, 2, 20, tzinfo=UTC), NOW),  # longer than the history
)


@pytest.fixture(params=STORES)
def db(request: pytest.FixtureRequest, tmp_path: Path, postgres_url_factory: Any) -> Iterator[Database]:
    database = Database(settings_for(store_url(request.param, tmp_path, postgres_url_factory)))
    upgrade(database.write_engine)
    yield database
    database.dispose()


def random_history(db: Database, seed: int, leases: int = 240) -> None:
    """Leases over the week before ``NOW``: minutes to days long (some longer than a day, some of zero
    length), a tenth still running, a third of the ended ones preempted (half of those after a
    checkpoint), a quarter borrowing, on three subjects and two pools, with two or three keys."""
    rng = random.Random(seed)
    rows = []
    for i in range(leases):
        granted = NOW - timedelta(seconds=rng.uniform(0, 7 * 86400), microseconds=rng.randrange(10**6))
        running = i % 10 == 0
        held = timedelta(seconds=0 if i % 37 == 0 else rng.expovariate(1 / 20000) * (8 if i % 9 == 0 else 1))
        released = None if running else min(NOW - timedelta(seconds=1), granted + held)
        preempted = not running and i % 3 == 0
        gpus = rng.choice((500, 1000, 4000, 8000))
        checkpoint = None
        if preempted and released is not None and i % 2 == 0:
            checkpoint = granted + (released - granted) * rng.random()
        resources = {"gpu": gpus, "mcpu": 2000} | ({"mem": 3} if i % 5 == 0 else {})
        rows.append(
            {
                "id": f"l{seed}-{i:05d}-{uuid.uuid4().hex[:6]}",
                "request_id": f"r{seed}-{i:05d}",
                "subject": f"team-{i % 3}",
                "pool": f"pool-{i % 2}",
                "stack": "local",
                "state": "active" if running else ("preempted" if preempted else "released"),
                "resources": resources,
                "borrowed": {"gpu": gpus // 2} if i % 4 == 0 else {},
                "placement": {},
                "preemptible": True,
                "labels": {},
                "granted_at": granted,
                "expires_at": NOW + timedelta(days=1),
                "released_at": released,
                "checkpointed_at": checkpoint,
            }
        )
    db.write(lambda tx: tx.conn.execute(LEASES.insert(), rows))


def direct(db: Database, since: datetime, until: datetime, subject: str | None, by: list[Dimension]) -> Any:
    return db.read(lambda conn: aggregate(intervals(conn, since, until, NOW, subject), since, until, by))


def through_rollup(
    db: Database, since: datetime, until: datetime, subject: str | None, by: list[Dimension]
) -> dict[tuple[Any, ...], Totals]:
    return db.read(lambda conn: usage_totals(conn, since, until, NOW, subject, by))


def assert_same_everywhere(db: Database) -> int:
    """Every window and grouping (and one subject's view) equal the direct sums exactly; returns how
    many groups were compared."""
    compared = 0
    for since, until in WINDOWS:
        for names in GROUPINGS:
            by = [Dimension(n) for n in names]
            for subject in (None, "team-1"):
                want = direct(db, since, until, subject, by)
                got = through_rollup(db, since, until, subject, by)
                assert got == want, (since, until, names, subject)
                compared += len(want)
    return compared


def rolled(db: Database) -> tuple[int, int]:
    def count(conn: sa.Connection) -> tuple[int, int]:
        marked = conn.execute(sa.select(sa.func.count()).where(LEASES.c.usage_rolled > 0)).scalar_one()
        return marked, conn.execute(sa.select(sa.func.count()).select_from(USAGE_ROLLUP)).scalar_one()

    return db.read(count)


def test_the_rollup_answers_what_the_leases_answer_however_much_is_rolled_up(db: Database) -> None:
    random_history(db, seed=26)
    assert rolled(db) == (0, 0)
    assert assert_same_everywhere(db) > 100  # nothing rolled up: all summed on read
    assert len(db.write(lambda tx: roll_up(tx, limit=70))) == 70
    assert assert_same_everywhere(db) > 100  # some rolled up, the rest read
    random_history(db, seed=27, leases=60)  # more leases end after part of their days were rolled up
    assert catch_up(db, limit=50) == 240 - 24 - 70 + 60 - 6  # every ended lease; the running ones stay
    marked, cells = rolled(db)
    assert marked == 240 - 24 + 60 - 6 and cells > 0
    long = db.read(lambda conn: conn.execute(sa.select(sa.func.count()).where(LEASES.c.usage_rolled == ROLLED_LONG)))
    assert long.scalar_one() > 0, "the history has leases held longer than a day: the edges find them by end"
    assert assert_same_everywhere(db) > 100
    assert catch_up(db) == 0  # idempotent: nothing is rolled up twice


def test_a_batch_that_fails_leaves_nothing_behind(db: Database) -> None:
    random_history(db, seed=5, leases=40)

    def crash(tx: Tx) -> None:
        assert roll_up(tx)
        raise RuntimeError("the process died before the commit")

    with pytest.raises(RuntimeError, match="died"):
        db.write(crash)
    assert rolled(db) == (0, 0)
    catch_up(db)
    assert assert_same_everywhere(db) > 0


def test_replicas_rolling_up_at_once_count_every_lease_once(tmp_path: Path, postgres_url_factory: Any) -> None:
    """Two processes' roll-ups (two engines on one PostgreSQL database) race over the same leases."""
    url = postgres_url_factory()
    first, second = Database(settings_for(url)), Database(settings_for(url))
    try:
        upgrade(first.write_engine)
        random_history(first, seed=11, leases=400)
        errors: list[BaseException] = []

        def run(db: Database) -> None:
            try:
                catch_up(db, limit=25)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(db,)) for db in (first, second, first)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert errors == []
        assert rolled(first)[0] == 400 - 40
        assert assert_same_everywhere(second) > 100
    finally:
        first.dispose()
        second.dispose()


@pytest.mark.parametrize("kind", STORES)
def test_the_leader_rolls_up_a_released_lease_by_itself(kind: str, tmp_path: Path, postgres_url_factory: Any) -> None:
    settings = settings_for(store_url(kind, tmp_path, postgres_url_factory), usage_rollup_s=0.2)
    with TestClient(create_app(settings)) as client:
        api = Api(client)
        world = api.world()
        request = api.submit(world.token, resources={"gpu": 2}, preemptible=True)
        lease = api.ok("POST", f"/v1/leases/{request['lease_id']}/release", world.token)
        db = client.app.state.services.db  # type: ignore[attr-defined]
        marked = sa.select(LEASES.c.usage_rolled).where(LEASES.c.id == lease["id"])
        deadline = time.monotonic() + 60
        while db.read(lambda conn: conn.execute(marked).scalar_one()) == 0:
            assert time.monotonic() < deadline, "the leader did not roll up the released lease within 60 s"
            time.sleep(0.1)
        held = (
            datetime.fromisoformat(lease["released_at"]) - datetime.fromisoformat(lease["granted_at"])
        ).total_seconds()
        since = datetime.fromisoformat(lease["granted_at"]) - timedelta(hours=2)
        body = api.ok("GET", "/v1/usage", params={"since": since.isoformat(), "by": "subject,pool,hour"})
        rows = [row for row in body["rows"] if row["pool"] == world.pool]
        assert sum(row["total"]["gpu"] for row in rows) == pytest.approx(2 * held, abs=0.002)
        assert sum(row["leases"] for row in rows) == len(rows) >= 1
