"""Hosts that agents report for a pool. A report lives ``ttl_s``; an agent renews it with the same PUT
(its heartbeat). A host whose report expired leaves the pool's inventory — the leases placed on it keep
their records, and the reconciler logs a ``host_lost`` event — and comes back with its next report."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa
from pydantic import ValidationError

from respools.model import GPU, Host, PoolSpec, is_mig_key
from respools.scheduling import check_pool
from respools.server.db.database import Database, Tx, utcnow
from respools.server.db.tables import HOSTS
from respools.server.definitions import HostReport, bump_config, load
from respools.server.errors import conflict, invalid, not_found
from respools.server.schemas import RegisteredHost


def _registered(report: HostReport, live: bool) -> RegisteredHost:
    return RegisteredHost(
        pool=report.pool,
        host=report.host,
        registered_at=report.registered_at,
        last_seen_at=report.last_seen_at,
        expires_at=report.expires_at,
        live=live,
    )


def report_host(db: Database, pool_name: str, host_name: str, host: Host, ttl_s: float) -> tuple[RegisteredHost, bool]:
    """Register or renew a host; returns the report and whether the host is new to the pool."""
    if host.name != host_name:
        raise invalid(f"the body names host {host.name!r} but the path says {host_name!r}: make them agree", "name")

    def work(tx: Tx) -> tuple[RegisteredHost, bool]:
        defs = load(tx.conn)
        pool = defs.pools.get(pool_name)
        if pool is None:
            raise not_found("pool", pool_name, "pool")
        declared = [k for k in pool.capacity if k == GPU or is_mig_key(k)]
        if declared:
            raise conflict(
                f"pool {pool_name!r} declares capacity {declared[0]!r} itself; remove it from the pool "
                "so that its GPUs come from the hosts agents report",
                f"capacity.{declared[0]}",
            )
        others = [r.host for r in defs.hosts.get(pool_name, []) if r.host.name != host_name]
        declared_hosts = [
            h for h in pool.inventory or [] if h.name != host_name and h.name not in {o.name for o in others}
        ]
        try:
            candidate = PoolSpec.model_validate(
                pool.model_dump(exclude={"created_at", "updated_at", "inventory"})
                | {"inventory": [h.model_dump() for h in [*declared_hosts, *others, host]]}
            )
        except ValidationError as exc:
            raise invalid(str(exc.errors()[0]["msg"]).removeprefix("Value error, "), "gpus") from exc
        check_pool(candidate)
        row = (
            tx.conn.execute(
                sa.select(HOSTS).where(HOSTS.c.pool == pool_name, HOSTS.c.name == host_name).with_for_update()
            )
            .mappings()
            .first()
        )
        document = host.model_dump(mode="json")
        expires_at = tx.now + timedelta(seconds=ttl_s)
        if row is None:
            tx.conn.execute(
                sa.insert(HOSTS).values(
                    pool=pool_name,
                    name=host_name,
                    host=document,
                    registered_at=tx.now,
                    last_seen_at=tx.now,
                    expires_at=expires_at,
                    lost=False,
                )
            )
            registered_at = tx.now
        else:
            tx.conn.execute(
                sa.update(HOSTS)
                .where(HOSTS.c.pool == pool_name, HOSTS.c.name == host_name)
                .values(host=document, last_seen_at=tx.now, expires_at=expires_at, lost=False)
            )
            registered_at = row["registered_at"]
        if row is None or row["host"] != document or row["lost"]:
            bump_config(tx)  # a plain renewal only moves times, which readers fetch fresh
        else:
            tx.changes.wake = True
        report = HostReport(pool_name, host, registered_at, tx.now, expires_at, lost=False)
        return _registered(report, live=True), row is None

    return db.write(work)


def list_hosts(db: Database, pool_name: str) -> list[RegisteredHost]:
    defs = db.read(load)
    if pool_name not in defs.pools:
        raise not_found("pool", pool_name, "pool")
    now = utcnow()
    return [_registered(r, r.live_at(now)) for r in defs.hosts.get(pool_name, [])]


def forget_host(db: Database, pool_name: str, host_name: str) -> None:
    """Remove a host report (a decommissioned machine)."""

    def work(tx: Tx) -> None:
        deleted = tx.conn.execute(sa.delete(HOSTS).where(HOSTS.c.pool == pool_name, HOSTS.c.name == host_name))
        if deleted.rowcount == 0:
            raise not_found("host", f"{pool_name}/{host_name}", "host")
        bump_config(tx)

    db.write(work)
