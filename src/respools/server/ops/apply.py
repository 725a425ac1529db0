"""A set of definition changes applied as one: ``respools apply`` sends a file's whole plan here, and
either every change holds or none does. Each change is the same operation its single-object route
runs, joined to one transaction (``Database.write_unit``), so the rules it is checked by — reserved
shares within capacity, references that exist, policies a pool replacement must still honour — are the
ones the API applies one call at a time, each seeing the changes before it."""

from __future__ import annotations

from typing import Any

from respools.scheduling import DefinitionError
from respools.server.db.database import Database, Tx
from respools.server.errors import ApiError
from respools.server.ops import policies, pools, reservations, subjects, tokens
from respools.server.schemas import (
    AppliedChange,
    AppliedChanges,
    CreateReservation,
    DefinitionChange,
    DeletePolicy,
    DeletePool,
    DeleteReservation,
    DeleteSubject,
    IssueToken,
    PutPolicy,
    PutPool,
    PutSubject,
    RevokeToken,
)


def _carry_out(db: Database, change: DefinitionChange) -> Any:
    match change:
        case PutPool(spec=spec):
            return pools.put_pool(db, spec)[0]
        case DeletePool(name=name):
            return pools.delete_pool(db, name)
        case PutSubject(spec=spec):
            return subjects.put_subject(db, spec.name, spec)[0]
        case DeleteSubject(name=name):
            return subjects.delete_subject(db, name)
        case PutPolicy(spec=spec):
            return policies.put_policy(db, spec)[0]
        case DeletePolicy(pool=pool, subject=subject):
            return policies.delete_policy(db, pool, subject)
        case CreateReservation(spec=spec):
            return reservations.create_reservation(db, spec)
        case DeleteReservation(id=reservation_id):
            return reservations.delete_reservation(db, reservation_id)
        case IssueToken(spec=spec):
            return tokens.issue_token(db, spec)
        case RevokeToken(id=token_id):
            return tokens.revoke_token(db, token_id)
    raise AssertionError(f"unknown change {change!r}")  # the schema admits no other


def apply_changes(db: Database, changes: list[DefinitionChange]) -> AppliedChanges:
    """All of ``changes`` in order, in one transaction; the first refusal rolls every change back and is
    answered with the change's index and field (``changes[2].spec.reserved.gpu``)."""

    def unit(_: Tx) -> AppliedChanges:
        results = []
        for index, change in enumerate(changes):
            try:
                results.append(AppliedChange(op=change.op, result=_carry_out(db, change)))
            except ApiError as exc:
                raise _located(exc, index, change) from None
            except DefinitionError as exc:
                raise _located(ApiError(422, exc.message, exc.field), index, change) from None
        return AppliedChanges(results=results)

    return db.write_unit(unit)


def _located(exc: ApiError, index: int, change: DefinitionChange) -> ApiError:
    inner = "spec." if hasattr(change, "spec") else ""
    field = f"changes[{index}].{inner}{exc.field}" if exc.field else f"changes[{index}]"
    detail = f"change {index} ({change.op}) was refused, and no change was applied: {exc.detail}"
    return ApiError(exc.status, detail, field)
