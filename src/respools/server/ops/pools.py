"""Pools: define, replace, delete, drain."""

from __future__ import annotations

import sqlalchemy as sa

from respools.model import GPU, Pool, PoolSpec, is_mig_key
from respools.scheduling import DefinitionError, check_policy, check_pool, check_reservation
from respools.server.backends import vet_pool
from respools.server.codec import pool_document, pool_of
from respools.server.db.database import Database, Tx
from respools.server.db.tables import HOSTS, LEASES, POLICIES, POOLS, RESERVATIONS
from respools.server.definitions import Definitions, bump_config, load
from respools.server.errors import conflict, invalid, not_found
from respools.server.lifecycle import LIVE


def _check_against_dependents(spec: PoolSpec, defs: Definitions) -> None:
    """A changed pool must still honour its policies and reservations; name the first it would break."""
    if defs.hosts.get(spec.name):
        for key in spec.capacity:
            if key == GPU or is_mig_key(key):
                raise invalid(
                    f"agents report hosts to pool {spec.name!r}, so its {key!r} comes from their inventory: "
                    "remove the key",
                    f"capacity.{key}",
                )
    pool = defs.known_pool(spec.name, spec)
    policies = defs.policies_of_pool(pool.name)
    for policy in policies:
        try:
            check_policy(policy, pool, policies)
        except DefinitionError as exc:
            raise invalid(
                f"policy of subject {policy.subject!r} would no longer fit this pool ({exc.field}: {exc.message}); "
                "change the policy first",
                "capacity",
            ) from exc
    reservations = defs.reservations_of_pool(pool.name)
    for reservation in reservations:
        others = [r for r in reservations if r.id != reservation.id]
        try:
            check_reservation(reservation, pool, policies, others)
        except DefinitionError as exc:
            raise invalid(
                f"reservation {reservation.id} would no longer fit this pool ({exc.field}: {exc.message}); "
                "delete or move it first",
                "capacity",
            ) from exc


def validated(spec: PoolSpec) -> PoolSpec:
    """Check a pool definition on its own and with its backend; returns it with forms filled in."""
    spec = vet_pool(spec)
    check_pool(spec)
    return spec


def put_pool(db: Database, spec: PoolSpec, *, create_only: bool = False) -> tuple[Pool, bool]:
    """Create or replace a pool; returns it and whether it was created."""
    spec = validated(spec)

    def work(tx: Tx) -> tuple[Pool, bool]:
        existing = (
            tx.conn.execute(sa.select(POOLS).where(POOLS.c.name == spec.name).with_for_update()).mappings().first()
        )
        if existing is not None and create_only:
            raise conflict(f"pool {spec.name!r} exists already: use PUT /v1/pools/{spec.name} to replace it", "name")
        _check_against_dependents(spec, load(tx.conn))
        if existing is not None:
            tx.conn.execute(
                sa.update(POOLS).where(POOLS.c.name == spec.name).values(spec=pool_document(spec), updated_at=tx.now)
            )
        else:
            tx.conn.execute(
                sa.insert(POOLS).values(name=spec.name, spec=pool_document(spec), created_at=tx.now, updated_at=tx.now)
            )
        bump_config(tx)
        row = tx.conn.execute(sa.select(POOLS).where(POOLS.c.name == spec.name)).mappings().one()
        return pool_of(row), existing is None

    return db.write(work)


def get_pool(db: Database, name: str) -> Pool:
    row = db.read(lambda conn: conn.execute(sa.select(POOLS).where(POOLS.c.name == name)).mappings().first())
    if row is None:
        raise not_found("pool", name, "pool")
    return pool_of(row)


def list_pools(db: Database) -> list[Pool]:
    rows = db.read(lambda conn: list(conn.execute(sa.select(POOLS).order_by(POOLS.c.name)).mappings()))
    return [pool_of(row) for row in rows]


def delete_pool(db: Database, name: str) -> None:
    """Delete a pool with its policies, reservations and host reports; refused while leases hold it."""

    def work(tx: Tx) -> None:
        found = tx.conn.execute(sa.select(POOLS.c.name).where(POOLS.c.name == name).with_for_update()).first()
        if found is None:
            raise not_found("pool", name, "pool")
        live = tx.conn.execute(
            sa.select(sa.func.count())
            .select_from(LEASES)
            .where(LEASES.c.pool == name, LEASES.c.state.in_(sorted(LIVE)))
        ).scalar_one()
        if live:
            raise conflict(
                f"pool {name!r} still has {live} live lease(s): drain it (POST /v1/pools/{name}/drain) "
                "and wait for them to end, or preempt them"
            )
        for table in (POLICIES, RESERVATIONS, HOSTS):
            tx.conn.execute(sa.delete(table).where(table.c.pool == name))
        tx.conn.execute(sa.delete(POOLS).where(POOLS.c.name == name))
        bump_config(tx)

    db.write(work)


def set_draining(db: Database, name: str, draining: bool) -> Pool:
    """Stop (or resume) granting in a pool; leases already granted run on."""

    def work(tx: Tx) -> Pool:
        row = tx.conn.execute(sa.select(POOLS).where(POOLS.c.name == name).with_for_update()).mappings().first()
        if row is None:
            raise not_found("pool", name, "pool")
        pool = pool_of(row)
        if pool.draining != draining:
            spec = PoolSpec.model_validate(
                pool.model_dump(exclude={"created_at", "updated_at"}) | {"draining": draining}
            )
            tx.conn.execute(
                sa.update(POOLS).where(POOLS.c.name == name).values(spec=pool_document(spec), updated_at=tx.now)
            )
            bump_config(tx)
            row = tx.conn.execute(sa.select(POOLS).where(POOLS.c.name == name)).mappings().one()
        return pool_of(row)

    return db.write(work)
