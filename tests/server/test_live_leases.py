"""The leader's copy of the live leases (``reconciler/live_leases.py``) against a full read of the store.

The copy keeps, from the first read of a lease, the columns a grant fixes for good and re-reads only the
others. These tests run leases through every step of their life the service offers and require, at each
step, that the copy kept across the steps equals a fresh full read, and that no step changed a column
the copy takes as fixed: the day a statement starts changing one, they fail."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from respools.model import Lease
from respools.server.codec import lease_of
from respools.server.db.database import Database
from respools.server.db.tables import LEASES, LIVE_STATES_SQL
from respools.server.reconciler.live_leases import FIXED_AT_GRANT, LiveLeases
from tests.server.conftest import Api
from tests.server.test_api import wait_for

FULL_LIVE = sa.select(LEASES).where(sa.text(LIVE_STATES_SQL))


class Observer:
    """Reads the store after each step: the kept copy, a full read, and every lease's fixed columns."""

    def __init__(self, api: Api) -> None:
        self.db: Database = api.client.app.state.services.db  # type: ignore[attr-defined]
        self.kept = LiveLeases()
        self.fixed: dict[str, dict[str, Any]] = {}
        self.steps = 0

    def check(self, step: str) -> dict[str, Lease]:
        def read(conn: sa.Connection) -> tuple[list[Lease], dict[str, Lease], list[Any]]:
            kept = self.kept.load(conn)
            full = {row["id"]: lease_of(row) for row in conn.execute(FULL_LIVE).mappings().all()}
            every = conn.execute(sa.select(LEASES)).mappings().all()
            return kept, full, list(every)

        kept, full, every = self.db.read(read)
        assert len(kept) == len({lease.id for lease in kept}), step
        assert {lease.id: lease for lease in kept} == full, step
        for row in every:
            fixed = {name: row[name] for name in FIXED_AT_GRANT}
            assert self.fixed.setdefault(row["id"], fixed) == fixed, (step, row["id"])
        self.steps += 1
        return full


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
