"""Lease-scoped tokens: a credential a job can carry that acts on its own lease and nothing else.

A job that ``respools run`` or a pooled ZenML step operator starts on Vertex AI or Databricks gets its
lease's id in its environment; with a lease-scoped token beside it (``RESPOOLS_TOKEN``) the respools SDK
inside the job can hear its notice and heartbeat or release its lease, without the subject's own token
ever leaving the machine that submitted it. The token is a row of ``tokens`` with ``lease_id`` set; the
subject is the lease's, so every ownership check holds as for the subject's token, and on top of them:

- only the calls in :data:`ALLOWED` on *its* lease pass (read, heartbeat, release; ``whoami``); any other
  call is refused with 403 naming the lease it is scoped to;
- it expires with the lease: once the lease is no longer granted, active or preempting, every call is
  refused with 401 naming the lease and its state.
"""

from __future__ import annotations

import re

import sqlalchemy as sa

from respools.model import RequestState
from respools.server.db.database import Database
from respools.server.db.tables import LEASES
from respools.server.errors import ApiError, forbidden
from respools.server.schemas import Principal

HELD = frozenset({RequestState.GRANTED, RequestState.ACTIVE, RequestState.PREEMPTING})
ALLOWED: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("GET", re.compile(r"/v1/whoami")),
    ("GET", re.compile(r"/v1/leases/(?P<lease>[^/]+)")),
    ("POST", re.compile(r"/v1/leases/(?P<lease>[^/]+)/heartbeat")),
    ("POST", re.compile(r"/v1/leases/(?P<lease>[^/]+)/release")),
)
_LEASE_STATE = sa.select(LEASES.c.state).where(LEASES.c.id == sa.bindparam("k_id"))


def scope_refusal(principal: Principal, method: str, path: str) -> ApiError | None:
    """Why a lease-scoped ``principal`` may not make this call (``None`` when it may, for now)."""
    lease_id = principal.lease_id
    if lease_id is None:
        return None
    for allowed_method, pattern in ALLOWED:
        match = pattern.fullmatch(path)
        if match is None or allowed_method != method:
            continue
        if match.groupdict().get("lease", lease_id) == lease_id:
            return None
    return forbidden(
        f"this token is scoped to lease {lease_id}: it may only read, heartbeat and release that lease "
        f"({method} {path} is outside it); use the subject's token"
    )


def expired(db: Database, principal: Principal) -> ApiError | None:
    """401 once the token's lease is no longer held (the token ends with its lease)."""
    if principal.lease_id is None:
        return None
    state = db.read(lambda conn: conn.execute(_LEASE_STATE, {"k_id": principal.lease_id}).scalar())
    if state is not None and RequestState(state) in HELD:
        return None
    why = "no longer exists" if state is None else f"is {state}"
    return ApiError(
        401, f"this lease-scoped token ended with its lease: lease {principal.lease_id} {why}", "Authorization"
    )
