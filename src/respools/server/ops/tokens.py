"""Tokens: issue, list, revoke, and the bootstrap admin token of a fresh installation."""

from __future__ import annotations

import contextlib
import logging

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from respools.model import RequestState, Role
from respools.server.auth import TOKENS_TOPIC, hash_token, new_token, new_token_id, require_owner
from respools.server.db.database import Database, Tx
from respools.server.db.statements import LEASE_BY_ID
from respools.server.db.tables import META, TOKENS
from respools.server.errors import conflict, invalid, not_found
from respools.server.lease_tokens import HELD
from respools.server.ops.references import require_subject
from respools.server.schemas import IssuedToken, Principal, TokenInfo, TokenSpec

log = logging.getLogger(__name__)

BOOTSTRAP_KEY = "bootstrap_admin_token"


def _info(row: sa.RowMapping) -> TokenInfo:
    return TokenInfo(
        id=row["id"],
        role=Role(row["role"]),
        subject=row["subject"],
        description=row["description"],
        created_at=row["created_at"],
        lease_id=row["lease_id"],
    )


def issue_token(db: Database, spec: TokenSpec) -> IssuedToken:
    if spec.role == Role.SUBJECT and spec.subject is None:
        raise invalid("a token with role 'subject' must name its subject", "subject")

    def work(tx: Tx) -> IssuedToken:
        if spec.subject is not None:
            require_subject(tx, spec.subject)
        token = new_token()
        token_id = new_token_id()
        tx.conn.execute(
            sa.insert(TOKENS).values(
                id=token_id,
                token_hash=hash_token(token),
                role=spec.role.value,
                subject=spec.subject,
                description=spec.description,
                created_at=tx.now,
            )
        )
        return IssuedToken(
            id=token_id,
            role=spec.role,
            subject=spec.subject,
            description=spec.description,
            created_at=tx.now,
            token=token,
        )

    return db.write(work)


def issue_lease_token(db: Database, principal: Principal, lease_id: str) -> IssuedToken:
    """A token that acts on ``lease_id`` only, while it is held (:mod:`respools.server.lease_tokens`); for
    the lease's own subject or an admin."""

    def work(tx: Tx) -> IssuedToken:
        row = tx.conn.execute(LEASE_BY_ID, {"k_id": lease_id}).mappings().first()
        if row is None:
            raise not_found("lease", lease_id, "lease_id")
        require_owner(principal, row["subject"], f"lease {lease_id}")
        if RequestState(row["state"]) not in HELD:
            raise conflict(f"lease {lease_id} is {row['state']}: a lease-scoped token is issued only while it is held")
        token, token_id = new_token(), new_token_id()
        description = f"scoped to lease {lease_id}"
        tx.conn.execute(
            sa.insert(TOKENS).values(
                id=token_id,
                token_hash=hash_token(token),
                role=Role.SUBJECT.value,
                subject=row["subject"],
                description=description,
                created_at=tx.now,
                lease_id=lease_id,
            )
        )
        return IssuedToken(
            id=token_id,
            role=Role.SUBJECT,
            subject=row["subject"],
            description=description,
            created_at=tx.now,
            lease_id=lease_id,
            token=token,
        )

    return db.write(work)


def list_tokens(db: Database, subject: str | None = None) -> list[TokenInfo]:
    query = sa.select(TOKENS).order_by(TOKENS.c.created_at, TOKENS.c.id)
    if subject is not None:
        query = query.where(TOKENS.c.subject == subject)
    return [_info(row) for row in db.read(lambda conn: list(conn.execute(query).mappings()))]


def revoke_token(db: Database, token_id: str) -> None:
    def work(tx: Tx) -> None:
        if tx.conn.execute(sa.delete(TOKENS).where(TOKENS.c.id == token_id)).rowcount == 0:
            raise not_found("token", token_id, "id")
        tx.changes.config.add(TOKENS_TOPIC)

    db.write(work)


def ensure_admin_token(db: Database, token: str) -> None:
    """Make ``token`` a valid admin token (``RESPOOLS_ADMIN_TOKEN``: tests and demos)."""
    digest = hash_token(token)

    def work(tx: Tx) -> None:
        if tx.conn.execute(sa.select(TOKENS.c.id).where(TOKENS.c.token_hash == digest)).first() is None:
            tx.conn.execute(
                sa.insert(TOKENS).values(
                    id=new_token_id(),
                    token_hash=digest,
                    role=Role.ADMIN.value,
                    subject=None,
                    description="from RESPOOLS_ADMIN_TOKEN",
                    created_at=tx.now,
                )
            )
        _mark_bootstrapped(tx)

    with contextlib.suppress(IntegrityError):  # another replica inserted it at the same moment
        db.write(work)


def _mark_bootstrapped(tx: Tx) -> bool:
    if tx.conn.execute(sa.select(META.c.key).where(META.c.key == BOOTSTRAP_KEY)).first() is not None:
        return False
    tx.conn.execute(sa.insert(META).values(key=BOOTSTRAP_KEY, value=tx.now.isoformat()))
    return True


def bootstrap_admin_token(db: Database) -> str | None:
    """On the very first start, create an admin token and return it (to be printed once); ``None`` on
    every later start. Several replicas starting together agree through the ``meta`` row's key."""

    def work(tx: Tx) -> str | None:
        if not _mark_bootstrapped(tx):
            return None
        token = new_token()
        tx.conn.execute(
            sa.insert(TOKENS).values(
                id=new_token_id(),
                token_hash=hash_token(token),
                role=Role.ADMIN.value,
                subject=None,
                description="bootstrap admin token",
                created_at=tx.now,
            )
        )
        return token

    try:
        return db.write(work)
    except IntegrityError:
        return None
