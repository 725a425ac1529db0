"""Where capacity goes, per pool and per team: in share, borrowed, free, against reserved and limit.

Pure arithmetic over the pool definition, its policies and reservations, and the live holdings; both
the page (the numbers now) and the utilization charts (their teams, capacity and limits; see
:mod:`utilization`) use it, so the charts and the tables can never disagree. It mirrors the
scheduler's accounting: an active reservation adds to its subject's reserved share, an absent limit
(or a key absent from it) is the pool's total, and the borrowed part of each lease is what the
scheduler recorded when it granted it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from respools.model import Policy, PoolSpec, Reservation
from respools.scheduling import pool_capacity
from respools.server.dashboard.formatting import as_utc, ordered_keys

Vector = dict[str, int]


@dataclass(frozen=True, slots=True)
class Holding:
    """What one live lease holds (the part of a lease the accounting needs)."""

    pool: str
    subject: str
    resources: Vector
    borrowed: Vector


def _add(target: Vector, vector: Vector) -> None:
    for key, value in vector.items():
        target[key] = target.get(key, 0) + value


@dataclass(frozen=True, slots=True)
class TeamUsage:
    subject: str
    in_use: Vector
    borrowed: Vector
    reserved: Vector
    """The policy's reserved share plus the reservations active now."""
    limit: Vector
    """Per key of the pool's capacity: the policy's cap, or the pool's total where it sets none."""
    priority: int | None
    weight: float | None

    @property
    def has_policy(self) -> bool:
        return self.priority is not None

    def in_share(self, key: str) -> int:
        return self.in_use.get(key, 0) - self.borrowed.get(key, 0)


@dataclass(frozen=True, slots=True)
class PoolUsage:
    pool: str
    capacity: Vector
    in_use: Vector
    borrowed: Vector
    teams: tuple[TeamUsage, ...]

    @property
    def keys(self) -> list[str]:
        """The keys the pool meters, in display order."""
        return ordered_keys(self.capacity)

    def in_share(self, key: str) -> int:
        return self.in_use.get(key, 0) - self.borrowed.get(key, 0)

    def free(self, key: str) -> int:
        return max(0, self.capacity.get(key, 0) - self.in_use.get(key, 0))


def reserved_at(policy: Policy | None, reservations: Iterable[Reservation], now: datetime) -> Vector:
    """The policy's reserved share plus the reservations active at ``now``."""
    reserved = dict(policy.reserved) if policy is not None else {}
    for reservation in reservations:
        if as_utc(reservation.start) <= now < as_utc(reservation.end):
            _add(reserved, reservation.resources)
    return reserved


def pool_usage(
    pool: PoolSpec,
    policies: Sequence[Policy],
    reservations: Sequence[Reservation],
    holdings: Iterable[Holding],
    now: datetime,
) -> PoolUsage:
    """The accounting of ``pool`` (an effective pool: its inventory as the scheduler sees it now)."""
    capacity = dict(pool_capacity(pool))
    in_use: Vector = {}
    borrowed: Vector = {}
    team_use: dict[str, tuple[Vector, Vector]] = {}
    for holding in holdings:
        if holding.pool != pool.name:
            continue
        _add(in_use, holding.resources)
        _add(borrowed, holding.borrowed)
        used, lent = team_use.setdefault(holding.subject, ({}, {}))
        _add(used, holding.resources)
        _add(lent, holding.borrowed)
    by_subject = {p.subject: p for p in policies if p.pool == pool.name}
    reserving = {r.subject for r in reservations if r.pool == pool.name and as_utc(r.end) > now}
    teams = []
    for subject in sorted(set(by_subject) | set(team_use) | reserving):
        policy = by_subject.get(subject)
        used, lent = team_use.get(subject, ({}, {}))
        cap = policy.limit if policy is not None and policy.limit is not None else {}
        teams.append(
            TeamUsage(
                subject=subject,
                in_use=used,
                borrowed=lent,
                reserved=reserved_at(
                    policy, (r for r in reservations if r.pool == pool.name and r.subject == subject), now
                ),
                limit={key: cap.get(key, total) for key, total in capacity.items()},
                priority=policy.priority if policy is not None else None,
                weight=policy.weight if policy is not None else None,
            )
        )
    return PoolUsage(pool.name, capacity, in_use, borrowed, tuple(teams))
