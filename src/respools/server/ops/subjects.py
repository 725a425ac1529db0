"""Subjects: the teams, projects or stack components that consume capacity."""

from __future__ import annotations

import sqlalchemy as sa

from respools.model import RequestState, Subject
from respools.server.codec import subject_of
from respools.server.db.database import Database, Tx
from respools.server.db.statements import SUBJECT_EXISTS
from respools.server.db.tables import POLICIES, REQUESTS, RESERVATIONS, SUBJECTS, TOKENS
from respools.server.definitions import bump_config
from respools.server.errors import conflict, invalid, not_found

_BUSY = [s.value for s in (RequestState.PENDING, RequestState.GRANTED, RequestState.ACTIVE, RequestState.PREEMPTING)]


def put_subject(db: Database, name: str, subject: Subject) -> tuple[Subject, bool]:
    if subject.name != name:
        raise invalid(f"the body names subject {subject.name!r} but the path says {name!r}: make them agree", "name")

    def work(tx: Tx) -> tuple[Subject, bool]:
        exists = tx.conn.execute(sa.select(SUBJECTS.c.name).where(SUBJECTS.c.name == name).with_for_update()).first()
        values = {"display_name": subject.display_name, "labels": subject.labels}
        if exists:
            tx.conn.execute(sa.update(SUBJECTS).where(SUBJECTS.c.name == name).values(**values))
        else:
            tx.conn.execute(sa.insert(SUBJECTS).values(name=name, created_at=tx.now, **values))
        return subject, exists is None

    return db.write(work)


def get_subject(db: Database, name: str) -> Subject:
    row = db.read(lambda conn: conn.execute(sa.select(SUBJECTS).where(SUBJECTS.c.name == name)).mappings().first())
    if row is None:
        raise not_found("subject", name, "subject")
    return subject_of(row)


def list_subjects(db: Database, only: str | None = None) -> list[Subject]:
    query = sa.select(SUBJECTS).order_by(SUBJECTS.c.name)
    if only is not None:
        query = query.where(SUBJECTS.c.name == only)
    return [subject_of(row) for row in db.read(lambda conn: list(conn.execute(query).mappings()))]


def subject_exists(tx: Tx, name: str) -> bool:
    return tx.conn.execute(SUBJECT_EXISTS, {"k_name": name}).first() is not None


def delete_subject(db: Database, name: str) -> None:
    """Delete a subject with its policies, reservations and tokens; refused while it has requests in
    flight, because their leases would lose their owner."""

    def work(tx: Tx) -> None:
        if tx.conn.execute(sa.select(SUBJECTS.c.name).where(SUBJECTS.c.name == name).with_for_update()).first() is None:
            raise not_found("subject", name, "subject")
        busy = tx.conn.execute(
            sa.select(sa.func.count())
            .select_from(REQUESTS)
            .where(REQUESTS.c.subject == name, REQUESTS.c.state.in_(_BUSY))
        ).scalar_one()
        if busy:
            raise conflict(f"subject {name!r} has {busy} request(s) pending or holding leases: cancel them first")
        for table in (POLICIES, RESERVATIONS, TOKENS):
            tx.conn.execute(sa.delete(table).where(table.c.subject == name))
        tx.conn.execute(sa.delete(SUBJECTS).where(SUBJECTS.c.name == name))
        bump_config(tx)
        tx.changes.config.add("tokens")

    db.write(work)
