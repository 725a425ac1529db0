"""Policies: a subject's reserved share, limit, priority and weight in one pool."""

from __future__ import annotations

import sqlalchemy as sa

from respools.model import Policy, PolicySpec
from respools.scheduling import check_policy
from respools.server.codec import policy_document, policy_of
from respools.server.db.database import Database, Tx
from respools.server.db.tables import POLICIES
from respools.server.definitions import bump_config, load
from respools.server.errors import not_found
from respools.server.ops.references import require_pool, require_subject


def put_policy(db: Database, spec: PolicySpec) -> tuple[Policy, bool]:
    """Create or replace the policy of ``spec.subject`` on ``spec.pool``."""

    def work(tx: Tx) -> tuple[Policy, bool]:
        defs = load(tx.conn)
        pool = require_pool(defs, spec.pool)
        require_subject(tx, spec.subject)
        check_policy(spec, pool, defs.policies_of_pool(spec.pool), defs.reservations_of_pool(spec.pool))
        key = (POLICIES.c.subject == spec.subject) & (POLICIES.c.pool == spec.pool)
        updated = tx.conn.execute(sa.update(POLICIES).where(key).values(spec=policy_document(spec), updated_at=tx.now))
        created = updated.rowcount == 0
        if created:
            tx.conn.execute(
                sa.insert(POLICIES).values(
                    subject=spec.subject, pool=spec.pool, spec=policy_document(spec), updated_at=tx.now
                )
            )
        bump_config(tx)
        return Policy.model_validate(spec.model_dump()), created

    return db.write(work)


def get_policy(db: Database, pool: str, subject: str) -> Policy:
    row = db.read(
        lambda conn: (
            conn.execute(sa.select(POLICIES).where(POLICIES.c.pool == pool, POLICIES.c.subject == subject))
            .mappings()
            .first()
        )
    )
    if row is None:
        raise not_found("policy", f"{subject}@{pool}")
    return policy_of(row)


def list_policies(db: Database, *, pool: str | None = None, subject: str | None = None) -> list[Policy]:
    query = sa.select(POLICIES).order_by(POLICIES.c.pool, POLICIES.c.subject)
    if pool is not None:
        query = query.where(POLICIES.c.pool == pool)
    if subject is not None:
        query = query.where(POLICIES.c.subject == subject)
    return [policy_of(row) for row in db.read(lambda conn: list(conn.execute(query).mappings()))]


def delete_policy(db: Database, pool: str, subject: str) -> None:
    """Delete a policy. Leases it granted run on; pending requests of the subject that no other policy
    admits are rejected by the next cycle."""

    def work(tx: Tx) -> None:
        deleted = tx.conn.execute(sa.delete(POLICIES).where(POLICIES.c.pool == pool, POLICIES.c.subject == subject))
        if deleted.rowcount == 0:
            raise not_found("policy", f"{subject}@{pool}")
        bump_config(tx)

    db.write(work)
