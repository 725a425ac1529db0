"""Reservations: a window in which a subject is guaranteed extra capacity in a pool."""

from __future__ import annotations

import uuid

import sqlalchemy as sa

from respools.model import Reservation, ReservationSpec
from respools.scheduling import check_reservation
from respools.server.codec import reservation_document, reservation_of
from respools.server.db.database import Database, Tx, utcnow
from respools.server.db.tables import RESERVATIONS
from respools.server.definitions import bump_config, load
from respools.server.errors import invalid, not_found
from respools.server.ops.references import require_pool, require_subject


def create_reservation(db: Database, spec: ReservationSpec) -> Reservation:
    def work(tx: Tx) -> Reservation:
        if spec.end <= tx.now:
            raise invalid("the window is already over: give an end in the future", "end")
        defs = load(tx.conn)
        pool = require_pool(defs, spec.pool)
        require_subject(tx, spec.subject)
        check_reservation(spec, pool, defs.policies_of_pool(spec.pool), defs.reservations_of_pool(spec.pool))
        reservation = Reservation.model_validate(spec.model_dump() | {"id": "rsv_" + uuid.uuid4().hex[:16]})
        tx.conn.execute(
            sa.insert(RESERVATIONS).values(
                id=reservation.id,
                subject=spec.subject,
                pool=spec.pool,
                spec=reservation_document(reservation),
                end_at=spec.end,
                created_at=tx.now,
            )
        )
        bump_config(tx)
        return reservation

    return db.write(work)


def get_reservation(db: Database, reservation_id: str) -> Reservation:
    row = db.read(
        lambda conn: conn.execute(sa.select(RESERVATIONS).where(RESERVATIONS.c.id == reservation_id)).mappings().first()
    )
    if row is None:
        raise not_found("reservation", reservation_id, "id")
    return reservation_of(row)


def list_reservations(
    db: Database, *, pool: str | None = None, subject: str | None = None, include_past: bool = False
) -> list[Reservation]:
    query = sa.select(RESERVATIONS).order_by(RESERVATIONS.c.id)
    if pool is not None:
        query = query.where(RESERVATIONS.c.pool == pool)
    if subject is not None:
        query = query.where(RESERVATIONS.c.subject == subject)
    rows = db.read(lambda conn: list(conn.execute(query).mappings()))
    reservations = [reservation_of(row) for row in rows]
    if not include_past:
        now = utcnow()
        reservations = [r for r in reservations if r.end > now]
    return sorted(reservations, key=lambda r: (r.start, r.id))


def delete_reservation(db: Database, reservation_id: str) -> None:
    def work(tx: Tx) -> None:
        deleted = tx.conn.execute(sa.delete(RESERVATIONS).where(RESERVATIONS.c.id == reservation_id))
        if deleted.rowcount == 0:
            raise not_found("reservation", reservation_id, "id")
        bump_config(tx)

    db.write(work)
