"""Sign-in sessions: a bearer token is exchanged once for an HttpOnly session cookie.

Why a cookie: the page's live feed is an ``EventSource``, which cannot send an ``Authorization``
header, and a token in a URL ends up in logs and browser history. Why not the token itself in the
cookie: a session expires, names the token only by its id (so a stolen cookie is no API token), and
ends the moment its token is revoked, because every request looks the token id up again.

The cookie is ``<token id>.<expiry>.<nonce>.<HMAC>``, signed with a key kept in the store's ``meta``
table, so every replica accepts the sessions any replica issued. Write actions also carry a CSRF token
derived from the session (a header the page's script sends), on top of ``SameSite=Strict``."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import secrets
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from respools.server.db.database import Database, Tx
from respools.server.db.tables import META

COOKIE_NAME = "respools_session"
KEY_META = "dashboard_session_key"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def load_or_create_key(db: Database) -> bytes:
    """The signing key shared by all replicas, created by whichever starts first."""

    def read(conn: sa.Connection) -> str | None:
        value: str | None = conn.execute(sa.select(META.c.value).where(META.c.key == KEY_META)).scalar()
        return value

    existing = db.read(read)
    if existing is None:

        def create(tx: Tx) -> None:
            tx.conn.execute(sa.insert(META).values(key=KEY_META, value=secrets.token_hex(32)))

        with contextlib.suppress(IntegrityError):  # another replica created it first
            db.write(create)
        existing = db.read(read)
    assert existing is not None
    return bytes.fromhex(existing)


@dataclass(frozen=True, slots=True)
class Session:
    token_id: str
    expires_at: int
    """Unix time after which the cookie is refused."""
    value: str
    """The cookie value."""


class SessionCodec:
    """Issues and verifies session cookies and their CSRF tokens."""

    def __init__(self, key: bytes, lifetime_s: float) -> None:
        self._key = key
        self.lifetime_s = lifetime_s

    def _sign(self, payload: str) -> str:
        return _b64(hmac.new(self._key, payload.encode(), hashlib.sha256).digest())

    def issue(self, token_id: str, now: float) -> Session:
        expires_at = int(now + self.lifetime_s)
        payload = f"{token_id}.{expires_at}.{secrets.token_hex(8)}"
        return Session(token_id, expires_at, f"{payload}.{self._sign(payload)}")

    def verify(self, value: str | None, now: float) -> Session | None:
        """The session of a cookie, or ``None`` when it is absent, forged, tampered with or expired."""
        if not value or len(value) > 512:
            return None
        payload, _, signature = value.rpartition(".")
        if not payload or not hmac.compare_digest(signature, self._sign(payload)):
            return None
        parts = payload.split(".")
        if len(parts) != 3 or not parts[1].isdigit():
            return None
        expires_at = int(parts[1])
        if expires_at <= now:
            return None
        return Session(parts[0], expires_at, value)

    def csrf_token(self, session: Session) -> str:
        return self._sign("csrf:" + session.value)

    def check_csrf(self, session: Session, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given, self.csrf_token(session))
