"""Bearer tokens and roles.

Tokens are 256-bit random strings; the store keeps only their SHA-256 (a slow password hash buys
nothing for secrets that cannot be guessed). Roles: ``admin`` defines pools, policies and tokens;
``subject`` submits and sees its own requests and leases only; ``viewer`` reads everything. Lookups
are cached per process for a short while; revoking a token tells every replica to forget it at once.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
import uuid

from respools.model import Role
from respools.server.changes import Changes
from respools.server.db.database import Database
from respools.server.db.statements import TOKEN_BY_HASH
from respools.server.errors import ApiError, forbidden
from respools.server.schemas import Principal

TOKEN_PREFIX = "rp_"
TOKENS_TOPIC = "tokens"


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def new_token_id() -> str:
    return "tok_" + uuid.uuid4().hex[:16]


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class TokenCache:
    """Token hash → principal, remembered for ``ttl_s`` (0 disables the cache)."""

    def __init__(self, db: Database, ttl_s: float) -> None:
        self._db = db
        self._ttl_s = ttl_s
        self._entries: dict[str, tuple[Principal, float]] = {}
        self._lock = threading.Lock()

    def on_changes(self, changes: Changes) -> None:
        if TOKENS_TOPIC in changes.config or changes.resync:
            with self._lock:
                self._entries.clear()

    def cached(self, token: str) -> Principal | None:
        entry = self._entries.get(hash_token(token))
        if entry is not None and entry[1] > time.monotonic():
            return entry[0]
        return None

    def lookup(self, token: str) -> Principal | None:
        """The principal of ``token`` from the store (blocking); ``None`` when unknown."""
        digest = hash_token(token)
        row = self._db.read(lambda conn: conn.execute(TOKEN_BY_HASH, {"k_hash": digest}).first())
        if row is None:
            return None
        principal = Principal(token_id=row.id, role=Role(row.role), subject=row.subject, lease_id=row.lease_id)
        if self._ttl_s > 0:
            with self._lock:
                self._entries[digest] = (principal, time.monotonic() + self._ttl_s)
        return principal


def unauthenticated(detail: str) -> ApiError:
    return ApiError(401, detail, "Authorization")


def require_admin(principal: Principal) -> None:
    if principal.role != Role.ADMIN:
        raise forbidden(f"this needs an admin token; yours has role {principal.role.value!r}")


def require_writer(principal: Principal) -> None:
    """Admins and subjects may submit and hold leases; viewers only read."""
    if principal.role == Role.VIEWER:
        raise forbidden("a viewer token can only read: use a subject or admin token")


def visible_subject(principal: Principal) -> str | None:
    """The only subject a principal may see, or ``None`` when it may see all."""
    return principal.subject if principal.role == Role.SUBJECT else None


def require_owner(principal: Principal, subject: str, what: str) -> None:
    """Refuse a subject token touching another subject's request or lease."""
    if principal.role == Role.SUBJECT and principal.subject != subject:
        raise forbidden(f"{what} belongs to subject {subject!r}; your token is for subject {principal.subject!r}")
