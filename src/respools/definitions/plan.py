"""The diff between the file and the server, as an ordered list of changes.

Order matters because the server checks every definition against the others: a policy cannot name a pool
that does not exist yet, and a pool cannot shrink below the reserved shares of its policies. So the plan
frees before it takes: deletions of policies, reservations and tokens first, then subjects, then policy
updates that only lower reservations, then pools, then the remaining policies, reservations and tokens,
and last the deletion of pools and subjects. Reservations and tokens cannot be edited through the API;
a changed one is replaced (deleted, then created again, which issues a new token secret).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .state import Item, Kind

MISSING = object()
"""A field one side of a change does not have."""


class Action(StrEnum):
    CREATE = "create"
    UPDATE = "update"
    REPLACE = "replace"
    DELETE = "delete"


@dataclass(frozen=True, slots=True)
class FieldChange:
    field: str
    before: Any
    after: Any


@dataclass(frozen=True, slots=True)
class Change:
    """One change: the file's item (``desired``, absent for deletions) against the server's (``current``)."""

    action: Action
    kind: Kind
    key: str
    desired: Item | None
    current: Item | None
    fields: tuple[FieldChange, ...] = ()


@dataclass
class Plan:
    changes: list[Change] = field(default_factory=list)
    unchanged: list[Item] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.changes

    def count(self, action: Action) -> int:
        return sum(1 for c in self.changes if c.action == action)


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Leaf values by dotted path, so a diff names ``inventory[0].gpus[1].memory_mb`` rather than
    printing two whole inventories. Empty containers are leaves, so that ``{}`` vs ``{"a": 1}`` shows."""
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key, inner in value.items():
            out.update(flatten(inner, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(value, list) and value:
        out = {}
        for i, inner in enumerate(value):
            out.update(flatten(inner, f"{prefix}[{i}]"))
        return out
    return {prefix: value}


def field_changes(before: dict[str, Any], after: dict[str, Any]) -> tuple[FieldChange, ...]:
    old, new = flatten(before), flatten(after)
    changes = []
    for path in sorted(old.keys() | new.keys(), key=_field_order(old, new)):
        a, b = old.get(path, MISSING), new.get(path, MISSING)
        if a != b:
            changes.append(FieldChange(path, a, b))
    return tuple(changes)


def _field_order(old: dict[str, Any], new: dict[str, Any]) -> Any:
    """Fields in the order the documents list them (the model's order), not alphabetically."""
    order = {path: i for i, path in enumerate([*old, *(p for p in new if p not in old)])}
    return lambda path: order[path]


def _compared(item: Item, ignored: frozenset[str]) -> dict[str, Any]:
    return {k: v for k, v in item.document.items() if k not in ignored}


def _raises_reservation(desired: Item, current: Item) -> bool:
    before: dict[str, Any] = current.document.get("reserved") or {}
    after: dict[str, Any] = desired.document.get("reserved") or {}
    return any(amount > before.get(key, 0) for key, amount in after.items())


def _phase(change: Change) -> int:
    """Position of a change in the apply order (see the module's docstring)."""
    kind, action = change.kind, change.action
    if action == Action.DELETE and kind in (Kind.POLICY, Kind.RESERVATION, Kind.TOKEN):
        return 0
    if kind == Kind.SUBJECT and action != Action.DELETE:
        return 1
    if kind == Kind.POLICY and action == Action.UPDATE:
        assert change.desired is not None and change.current is not None
        return 4 if _raises_reservation(change.desired, change.current) else 2
    if kind == Kind.POOL and action != Action.DELETE:
        return 3
    if kind == Kind.POLICY:
        return 4
    if kind in (Kind.RESERVATION, Kind.TOKEN):
        return 5
    return 6 if kind == Kind.POOL else 7


def make_plan(desired: list[Item], current: list[Item], *, prune: bool) -> Plan:
    """What to do so that the server holds ``desired``; with ``prune`` also delete what it does not name."""
    plan = Plan()
    have = {(item.kind, item.key): item for item in current}
    wanted = {(item.kind, item.key) for item in desired}
    for item in desired:
        existing = have.get((item.kind, item.key))
        if existing is None:
            plan.changes.append(Change(Action.CREATE, item.kind, item.key, item, None))
            continue
        diff = field_changes(_compared(existing, item.ignored), _compared(item, item.ignored))
        if not diff:
            plan.unchanged.append(item)
            continue
        action = Action.REPLACE if item.kind in (Kind.RESERVATION, Kind.TOKEN) else Action.UPDATE
        plan.changes.append(Change(action, item.kind, item.key, item, existing, diff))
    if prune:
        for item in current:
            if (item.kind, item.key) not in wanted:
                plan.changes.append(Change(Action.DELETE, item.kind, item.key, None, item))
    plan.changes.sort(key=_phase)  # stable: file order within a phase
    return plan
