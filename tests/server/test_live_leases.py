"""The leader's copy of the live leases (``reconciler/live_leases.py``) against a full read of the store.

The copy keeps, from the first read of a lease, the columns a grant fixes for good and re-reads only the
others. These tests run leases through every step of their life the service offers and require, at each
step, that the copy kept across the steps equals a fresh full read, that the sums it keeps for the core
(``LiveLeases.books``) account the pools as the full read does, and that no step changed a column the
copy takes as fixed: the day a statement starts changing one, they fail."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from respools.model import Lease
from respools.scheduling.state import LeaseBooks, build_pools
from respools.server.codec import lease_of
from respools.server.db.database import Database
from respools.server.db.tables import LEASES, LIVE_STATES_SQL
from respools.server.definitions import DefinitionsCache
from respools.server.reconciler.live_leases import FIXED_AT_GRANT, LiveLeases
from tests.server.conftest import Api
from tests.server.test_api import wait_for

FULL_LIVE = sa.select(LEASES).where(sa.text(LIVE_STATES_SQL))


class Observer:
    """Reads the store after each step: the kept copy, a full read, and every lease's fixed columns."""

    def __init__(self, api: Api) -> None:
        services = api.client.app.state.services  # type: ignore[attr-defined]
        self.db: Database = services.db
        self.definitions: DefinitionsCache = services.definitions
        self.kept = LiveLeases()
        self.fixed: dict[str, dict[str, Any]] = {}
        self.steps = 0
        self.books_compared = 0

    def check(self, step: str) -> dict[str, Lease]:
        def read(
            conn: sa.Connection,
        ) -> tuple[list[Lease], dict[str, Lease], list[Any], tuple[Accounting, Accounting] | None]:
            kept = self.kept.load(conn)
            full = {row["id"]: lease_of(row) for row in conn.execute(FULL_LIVE).mappings().all()}
            every = conn.execute(sa.select(LEASES)).mappings().all()
            now = datetime.now(UTC)
            books = self.kept.books(now)  # None while a lease may have expired: the cycle sums them itself
            summed = None
            if books is not None:
                summed = (
                    accounting(self.definitions, conn, now, list(full.values()), None),
                    accounting(self.definitions, conn, now, [], books),
                )
            return kept, full, list(every), summed

        kept, full, every, summed = self.db.read(read)
        assert len(kept) == len({lease.id for lease in kept}), step
        assert {lease.id: lease for lease in kept} == full, step
        if summed is not None:
            assert summed[1] == summed[0], step
            self.books_compared += 1
        for row in every:
            fixed = {name: row[name] for name in FIXED_AT_GRANT}
            assert self.fixed.setdefault(row["id"], fixed) == fixed, (step, row["id"])
        self.steps += 1
        return full


Accounting = dict[
    str, tuple[dict[str, tuple[dict[str, float], list[str], dict[str, float]]], dict[str, float], list[str]]
]
"""Per pool: per subject its usage, its leases and what is leaving; the pool's free capacity; its leases
under notice."""


def accounting(
    definitions: DefinitionsCache, conn: sa.Connection, now: datetime, leases: list[Lease], books: LeaseBooks | None
) -> Accounting:
    seen = definitions.within(conn)
    pools = build_pools(
        now, seen.effective_pools(now), seen.policies, seen.active_reservations(now), leases, None, books
    )
    return {
        name: (
            {s: (dict(q.usage), [lv.id for lv in q.leases], dict(q.leaving)) for s, q in state.quotas.items()},
            dict(state.free),
            [lv.id for lv in state.preempting],
        )
        for name, state in pools.items()
    }


def test_the_kept_copy_equals_a_full_read_through_every_step_of_a_lease_life(api: Api) -> None:
    seen = Observer(api)
    world = api.world({"gpu": 9}, preemption_grace_s=0.3, init_timeout_s=1.0)
    reclaimer = api.add_subject(world, "prod", reserved={"gpu": 5}, limit={"gpu": 9}, priority=100)
    seen.check("before")

    held = api.submit(world.token, resources={"gpu": 4}, preemptible=True, labels={"step": "train"}, max_retries=2)
    borrowed = api.submit(world.token, resources={"gpu": 4}, preemptible=True, max_retries=2)
    silent = api.submit(reclaimer, resources={"gpu": 1}, preemptible=True)
    assert held["state"] == borrowed["state"] == silent["state"] == "granted", (held, borrowed, silent)
    assert held["lease_id"] in seen.check("granted")

    for lease_id in (held["lease_id"], borrowed["lease_id"]):
        api.ok("POST", f"/v1/leases/{lease_id}/heartbeat", world.token)
    seen.check("started")
    api.ok("POST", f"/v1/leases/{held['lease_id']}/checkpoint", world.token)
    assert seen.check("checkpointed")[held["lease_id"]].checkpoints == 1
    api.ok("POST", f"/v1/leases/{held['lease_id']}/heartbeat", world.token)
    seen.check("renewed")

    # the reclaimer's waiter takes the borrowed lease through the scheduler: notice, then overdue
    waiter = api.submit(reclaimer, wait=0.5, resources={"gpu": 4}, preemptible=True)
    notice = wait_for(lambda: seen.check("notice")[borrowed["lease_id"]].preempt_deadline)
    assert notice is not None
    wait_for(lambda: seen.check("overdue")[borrowed["lease_id"]].overdue_since)
    api.ok("POST", f"/v1/leases/{borrowed['lease_id']}/release", world.token)
    assert borrowed["lease_id"] not in seen.check("preempted")
    assert api.wait_state(reclaimer, waiter["id"], "pending")["state"] == "granted"
    seen.check("reclaimed")

    # an admin's notice on the other, its release; the lease that never started expires
    api.ok("POST", f"/v1/leases/{held['lease_id']}/preempt", json={"message": "maintenance"})
    assert seen.check("admin notice")[held["lease_id"]].preempt_reason == "admin"
    api.ok("POST", f"/v1/leases/{held['lease_id']}/release", world.token)
    wait_for(lambda: silent["lease_id"] not in seen.check("expired"))
    final = seen.check("end")
    assert held["lease_id"] not in final and borrowed["lease_id"] not in final
    assert seen.steps >= 10
    assert seen.books_compared >= 8  # a step where some lease may have expired sums them in the cycle
