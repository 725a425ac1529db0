"""Both sides of a diff in one comparable form: what the file wants and what the server has.

Each object becomes an :class:`Item` keyed by kind and name, whose ``document`` is the object as the API
would store it, dumped through the same pydantic model on both sides, so that ``gpu: 4`` and ``gpu: 4.0``,
or ``+02:00`` and ``Z`` for the same instant, compare equal and a second apply changes nothing.

Reservations and tokens have server-generated ids; the file's ``name`` for them travels in the note and the
description behind a ``[apply:NAME]`` marker. Only marked ones take part in the diff, so ``--prune`` never
touches a token an operator issued by hand (such as the one running the apply).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from respools.model import PolicySpec, PoolSpec, ReservationSpec, Subject

from .document import DefinitionsFile, TokenEntry
from .source import FieldPath

_MARKER = re.compile(r"^\[apply:(?P<name>[a-z0-9][a-z0-9._-]*)\] ?(?P<rest>.*)$", re.S)

POOL_SET_ONLY_WHEN_GIVEN = ("forms", "draining")
"""Pool fields the file leaves to the server unless it sets them: ``forms`` defaults to what the backend
can express (the server fills it in), and ``draining`` is an operator's switch (``respools pool drain``)
that an apply must not undo behind their back."""


class Kind(StrEnum):
    SUBJECT = "subject"
    POOL = "pool"
    POLICY = "policy"
    RESERVATION = "reservation"
    TOKEN = "token"


@dataclass(frozen=True, slots=True)
class Item:
    """One object: its comparable ``document`` and, for the file's side, where it is written."""

    kind: Kind
    key: str
    document: dict[str, Any]
    ignored: frozenset[str] = frozenset()
    """Fields not compared (set only when given, see :data:`POOL_SET_ONLY_WHEN_GIVEN`)."""
    path: FieldPath | None = None
    ref: str | None = None
    """The server's id (reservations, tokens) or None."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Server values of ignored fields, which a replacement must carry over."""


def mark(name: str, text: str | None) -> str:
    return f"[apply:{name}]" + (f" {text}" if text else "")


def unmark(text: str | None) -> tuple[str | None, str | None]:
    """``(name, rest)`` of a marked note or description; ``(None, text)`` when unmarked."""
    match = _MARKER.match(text or "")
    if match is None:
        return None, text
    return match.group("name"), match.group("rest") or None


def policy_key(subject: str, pool: str) -> str:
    return f"{subject}@{pool}"


def _dump(model: Any, exclude: set[str] | None = None) -> dict[str, Any]:
    data: dict[str, Any] = model.model_dump(mode="json", exclude=exclude)
    return data


def _token_document(role: str, subject: str | None, description: str | None) -> dict[str, Any]:
    return {"role": role, "subject": subject, "description": description}


def desired_items(doc: DefinitionsFile) -> list[Item]:
    """What the file asks for, in file order within each kind."""
    items: list[Item] = []
    for i, subject in enumerate(doc.subjects):
        items.append(Item(Kind.SUBJECT, subject.name, _dump(subject), path=("subjects", i)))
    for i, pool in enumerate(doc.pools):
        ignored = frozenset(f for f in POOL_SET_ONLY_WHEN_GIVEN if f not in pool.model_fields_set)
        items.append(Item(Kind.POOL, pool.name, _dump(pool), ignored=ignored, path=("pools", i)))
    for i, policy in enumerate(doc.policies):
        items.append(Item(Kind.POLICY, policy_key(policy.subject, policy.pool), _dump(policy), path=("policies", i)))
    for i, reservation in enumerate(doc.reservations):
        document = _dump(ReservationSpec.model_validate(reservation.model_dump(exclude={"name"})))
        items.append(Item(Kind.RESERVATION, reservation.name, document, path=("reservations", i)))
    for i, token in enumerate(doc.tokens):
        items.append(Item(Kind.TOKEN, token.name, _token_entry_document(token), path=("tokens", i)))
    return items


def _token_entry_document(token: TokenEntry) -> dict[str, Any]:
    return _token_document(token.role.value, token.subject, token.description)


@dataclass(frozen=True, slots=True)
class ServerState:
    """The server's objects as the API lists them (decoded JSON)."""

    pools: list[dict[str, Any]]
    subjects: list[dict[str, Any]]
    policies: list[dict[str, Any]]
    reservations: list[dict[str, Any]]
    tokens: list[dict[str, Any]]


def current_items(state: ServerState) -> list[Item]:
    """The server's side: every pool, subject and policy; the reservations and tokens an apply made."""
    items: list[Item] = []
    for raw in state.subjects:
        subject = Subject.model_validate(raw)
        items.append(Item(Kind.SUBJECT, subject.name, _dump(subject)))
    for raw in state.pools:
        pool = PoolSpec.model_validate({k: v for k, v in raw.items() if k in PoolSpec.model_fields})
        document = _dump(pool)
        extra = {f: document[f] for f in POOL_SET_ONLY_WHEN_GIVEN}
        items.append(Item(Kind.POOL, pool.name, document, extra=extra))
    for raw in state.policies:
        policy = PolicySpec.model_validate({k: v for k, v in raw.items() if k in PolicySpec.model_fields})
        items.append(Item(Kind.POLICY, policy_key(policy.subject, policy.pool), _dump(policy)))
    for raw in state.reservations:
        name, note = unmark(raw.get("note"))
        if name is None:
            continue
        spec = ReservationSpec.model_validate(
            {k: v for k, v in raw.items() if k in ReservationSpec.model_fields} | {"note": note}
        )
        items.append(Item(Kind.RESERVATION, name, _dump(spec), ref=str(raw["id"])))
    for raw in state.tokens:
        name, description = unmark(raw.get("description"))
        if name is None:
            continue
        document = _token_document(str(raw["role"]), raw.get("subject"), description)
        items.append(Item(Kind.TOKEN, name, document, ref=str(raw["id"])))
    return items


def request_body(item: Item, current: Item | None) -> dict[str, Any]:
    """The API body that makes the server hold ``item``: fields the file left unset are not sent
    (``forms``) or carried over from the server (``draining``), and names go behind their marker."""
    body = {k: v for k, v in item.document.items() if k not in item.ignored}
    if item.kind == Kind.POOL and current is not None and "draining" in item.ignored:
        body["draining"] = current.extra.get("draining", False)
    if item.kind == Kind.RESERVATION:
        body["note"] = mark(item.key, item.document.get("note"))
    if item.kind == Kind.TOKEN:
        body["description"] = mark(item.key, item.document.get("description"))
    return body
