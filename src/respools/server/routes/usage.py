"""``/v1/usage``: key-seconds per subject, pool and day/hour, in share, borrowed and preempted.

Computed on read from lease rows by :mod:`respools.server.usage`, so every replica answers the same."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from respools.model import GPU, MILLI
from respools.server import usage
from respools.server.auth import visible_subject
from respools.server.errors import forbidden, invalid
from respools.server.routes.deps import ERRORS, Auth, ServicesDep
from respools.server.usage_query import usage_totals

router = APIRouter(prefix="/v1/usage", tags=["usage"], responses=ERRORS)

MAX_WINDOW = timedelta(days=400)
MAX_HOUR_BUCKETS = 24 * 93
DEFAULT_WINDOW = timedelta(days=30)


class UsageRow(BaseModel):
    """One group's usage. Amounts are key-seconds: ``gpu`` in GPU-seconds, other keys in their units
    times seconds. ``preempted`` is the part of ``in_share + borrowed`` held by leases that ended
    preempted (work that was interrupted)."""

    subject: str | None = None
    pool: str | None = None
    bucket: datetime | None = Field(default=None, description="start of the day or hour (UTC)")
    in_share: dict[str, float]
    borrowed: dict[str, float]
    preempted: dict[str, float]
    lost: dict[str, float] = Field(
        description="of `preempted`: the part since each lease's last checkpoint report (all of it for a lease "
        "that reported none): the work a rerun must redo"
    )
    total: dict[str, float]
    leases: int = Field(description="lease intervals that fell in this group")


class UsageReport(BaseModel):
    since: datetime
    until: datetime
    by: list[usage.Dimension]
    rows: list[UsageRow]


def _units(vector: dict[str, float]) -> dict[str, float]:
    return {k: round(v / MILLI if k == GPU else v, 3) for k, v in sorted(vector.items())}


def _aware(at: datetime) -> datetime:
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def parse_by(by: str) -> list[usage.Dimension]:
    names = [part.strip() for part in by.split(",") if part.strip()]
    allowed = ", ".join(d.value for d in usage.Dimension)
    dims: list[usage.Dimension] = []
    for name in names:
        if name not in usage.Dimension.__members__.values():
            raise invalid(f"by: unknown dimension {name!r}; use a comma-separated list of {allowed}", "by")
        dim = usage.Dimension(name)
        if dim in dims:
            raise invalid(f"by: {name!r} is listed twice", "by")
        dims.append(dim)
    if usage.Dimension.DAY in dims and usage.Dimension.HOUR in dims:
        raise invalid("by: choose day or hour, not both", "by")
    return dims


@router.get("", response_model=UsageReport, summary="Usage per subject, pool and day/hour")
def get_usage(
    services: ServicesDep,
    principal: Auth,
    since: Annotated[datetime | None, Query(description="start of the window (default: until - 30 days)")] = None,
    until: Annotated[datetime | None, Query(description="end of the window (default and at most: now)")] = None,
    by: Annotated[
        str, Query(max_length=64, description="comma-separated: subject, pool, day or hour")
    ] = "subject,pool",
    subject: Annotated[str | None, Query(max_length=63, description="only this subject")] = None,
) -> UsageReport:
    dims = parse_by(by)
    own = visible_subject(principal)
    if own is not None and subject is not None and subject != own:
        raise forbidden(f"your token is for subject {own!r}; it cannot read {subject!r}'s usage")
    now = usage.now_utc()
    end = min(_aware(until), now) if until is not None else now
    start = _aware(since) if since is not None else end - DEFAULT_WINDOW
    if start >= end:
        raise invalid("since must be before until (and before now)", "since")
    if end - start > MAX_WINDOW:
        raise invalid(f"since: the window may span at most {MAX_WINDOW.days} days; narrow since/until", "since")
    if usage.Dimension.HOUR in dims and end - start > timedelta(hours=MAX_HOUR_BUCKETS):
        raise invalid(f"by: hourly buckets cover at most {MAX_HOUR_BUCKETS // 24} days; use day", "by")
    who = own or subject
    groups = services.db.read(lambda conn: usage_totals(conn, start, end, now, who, dims))
    rows = []
    for key in sorted(groups, key=lambda k: tuple("" if v is None else str(v) for v in k)):
        totals = groups[key]
        named = dict(zip(dims, key, strict=True))
        both = dict(totals.in_share)
        usage.add_floats(both, totals.borrowed)
        rows.append(
            # built from the ledger's own values, so not validated again: a month by hour is thousands of rows
            UsageRow.model_construct(
                subject=named.get(usage.Dimension.SUBJECT),
                pool=named.get(usage.Dimension.POOL),
                bucket=named.get(usage.Dimension.DAY, named.get(usage.Dimension.HOUR)),
                in_share=_units(totals.in_share),
                borrowed=_units(totals.borrowed),
                preempted=_units(totals.preempted),
                lost=_units(totals.lost),
                total=_units(both),
                leases=totals.leases,
            )
        )
    return UsageReport(since=start, until=end, by=dims, rows=rows)
