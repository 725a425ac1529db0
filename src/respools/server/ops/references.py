"""Refusing a definition that names a pool or subject that does not exist, with the same words
wherever a definition refers to one (policies, reservations, tokens)."""

from __future__ import annotations

from respools.model import PoolSpec
from respools.server.db.database import Tx
from respools.server.definitions import Definitions
from respools.server.errors import invalid
from respools.server.ops.subjects import subject_exists


def require_pool(defs: Definitions, name: str) -> PoolSpec:
    """The pool as definitions are checked against it (see ``Definitions.known_pool``)."""
    if name not in defs.pools:
        raise invalid(f"pool {name!r} does not exist: create it first or fix the name", "pool")
    return defs.known_pool(name)


def require_subject(tx: Tx, name: str) -> None:
    if not subject_exists(tx, name):
        raise invalid(f"subject {name!r} does not exist: create it with PUT /v1/subjects/{name}", "subject")
