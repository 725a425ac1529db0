"""One consistent view of everything the dashboard shows, read for one viewer.

Visibility follows the API's: admins and viewers see everything; a subject token sees its own leases,
requests, events and reservations, and other subjects' holdings only as anonymous capacity (the GPU map
still shows that a GPU is taken, not by whom or for what)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa

from respools.model import Event, Lease, Pool, RequestState, Reservation, Role
from respools.server.dashboard import store
from respools.server.dashboard.formatting import as_utc, holder_color, primary_key, step_labels
from respools.server.dashboard.gpumap import GpuMap, Holder, build_gpu_map
from respools.server.dashboard.timeline import Timeline, build_timeline
from respools.server.dashboard.usage import Holding, PoolUsage, pool_usage
from respools.server.dashboard.utilization import PoolInputs, Utilization, utilization
from respools.server.db.database import utcnow
from respools.server.definitions import Definitions
from respools.server.schemas import Principal
from respools.server.services import Services
from respools.server.usage import Interval, intervals

HIDDEN_HOLDER = "another subject"


@dataclass(frozen=True, slots=True)
class Viewer:
    """The signed-in principal, and the CSRF token its page sends with actions."""

    principal: Principal
    csrf: str

    @property
    def is_admin(self) -> bool:
        return self.principal.role == Role.ADMIN

    @property
    def only_subject(self) -> str | None:
        return self.principal.subject if self.principal.role == Role.SUBJECT else None

    def sees(self, subject: str | None) -> bool:
        return self.only_subject is None or subject == self.only_subject


@dataclass(frozen=True, slots=True)
class PoolView:
    """A pool as its card shows it: the definition (for its settings), the accounting, the map."""

    pool: Pool
    usage: PoolUsage
    gpu_map: GpuMap | None
    chart_key: str | None
    live_hosts: int
    lost_hosts: int
    live_leases: int
    preempting: int
    waiting: int


@dataclass(frozen=True, slots=True)
class DashboardState:
    """Everything one viewer may see, as of ``now``."""

    now: datetime
    pools: tuple[PoolView, ...]
    leases: tuple[Lease, ...]
    queue: tuple[store.Waiting, ...]
    events: tuple[Event, ...]
    reservations: tuple[Reservation, ...]
    timeline: Timeline
    utilization: Utilization
    """The charts' series over the last ``window_s``, from the usage ledger."""


def holder_of(viewer: Viewer, lease: Lease) -> Holder:
    """A lease on the GPU map: named with its step for those who may see it, anonymous otherwise."""
    if not viewer.sees(lease.subject):
        return Holder(None, None, lease.state, HIDDEN_HOLDER, holder_color(None))
    labels = step_labels(lease.labels)
    label = f"{lease.subject} · {labels}" if labels else lease.subject
    return Holder(lease.id, lease.subject, lease.state, label, holder_color(lease.subject))


def _queue_order(entry: store.Waiting) -> tuple[str, int, datetime]:
    position = entry.request.queue_position
    return (entry.pool or "~", position if position is not None else 1 << 30, entry.request.submitted_at)


def _pool_view(
    definitions: Definitions,
    name: str,
    leases: list[Lease],
    waiting: int,
    viewer: Viewer,
    now: datetime,
) -> PoolView:
    pool_leases = [lease for lease in leases if lease.pool == name]
    holdings = [Holding(lease.pool, lease.subject, lease.resources, lease.borrowed) for lease in pool_leases]
    usage = pool_usage(
        definitions.effective_pool(name, now),
        definitions.policies_of_pool(name),
        definitions.reservations_of_pool(name),
        holdings,
        now,
    )
    usage = _scoped(usage, viewer)
    reports = definitions.hosts.get(name, [])
    live = {r.host.name for r in reports if r.live_at(now)}
    declared_only = {h.name for h in definitions.pools[name].inventory or []} - {r.host.name for r in reports}
    return PoolView(
        pool=definitions.pools[name],
        usage=usage,
        gpu_map=build_gpu_map(
            definitions.known_pool(name),
            live | declared_only if reports else None,
            pool_leases,
            lambda lease: holder_of(viewer, lease),
        ),
        chart_key=primary_key(usage.capacity),
        live_hosts=len(live),
        lost_hosts=len(reports) - len(live),
        live_leases=len(pool_leases),
        preempting=sum(1 for lease in pool_leases if lease.state == RequestState.PREEMPTING),
        waiting=waiting,
    )


def _chart_inputs(definitions: Definitions, usages: Iterable[PoolUsage]) -> list[PoolInputs]:
    return [
        PoolInputs(usage, key, definitions.policies_of_pool(usage.pool), definitions.reservations_of_pool(usage.pool))
        for usage in usages
        if (key := primary_key(usage.capacity)) is not None
    ]


def _scoped(usage: PoolUsage, viewer: Viewer) -> PoolUsage:
    """A subject sees the pool's totals, but only its own team row."""
    if viewer.only_subject is None:
        return usage
    teams = tuple(t for t in usage.teams if t.subject == viewer.only_subject)
    return PoolUsage(usage.pool, usage.capacity, usage.in_use, usage.borrowed, teams)


def load_utilization(services: Services, viewer: Viewer, window_s: float, until: datetime | None) -> Utilization:
    """The charts' series over ``[until - window_s, until]`` (``until`` at most, and by default, now),
    with the pools and teams as the definitions and the ledger have them at ``until``: a function of
    the store alone, so every replica answers the same for the same ``until``."""
    cached = services.definitions.get()

    def read(conn: sa.Connection) -> tuple[Definitions, datetime, list[Interval]]:
        now = utcnow()
        end = min(as_utc(until), now) if until is not None else now
        return cached.with_fresh_hosts(conn), end, intervals(conn, end - timedelta(seconds=window_s), end, now, None)

    definitions, end, spans = services.db.read(read)
    held = [Holding(s.pool, s.subject, s.resources, s.borrowed) for s in spans if s.start <= end <= s.end]
    usages = [
        _scoped(
            pool_usage(
                definitions.effective_pool(name, end),
                definitions.policies_of_pool(name),
                definitions.reservations_of_pool(name),
                held,
                end,
            ),
            viewer,
        )
        for name in sorted(definitions.pools)
    ]
    return utilization(_chart_inputs(definitions, usages), spans, end - timedelta(seconds=window_s), end)


def load_state(services: Services, viewer: Viewer, recent_events: int, window_s: float) -> DashboardState:
    """Everything on the page, from one read of the store (so the sections agree with each other)."""
    only = viewer.only_subject
    cached = services.definitions.get()

    def read(
        conn: sa.Connection,
    ) -> tuple[Definitions, datetime, list[Lease], list[store.Waiting], list[Event], list[Interval]]:
        now = utcnow()
        return (
            cached.with_fresh_hosts(conn),
            now,
            store.live_leases(conn),
            store.waiting(conn),
            store.recent_events(conn, recent_events, only),
            intervals(conn, now - timedelta(seconds=window_s), now, now, None),
        )

    definitions, now, leases, waiting, events, spans = services.db.read(read)
    waiting_by_pool = Counter(entry.pool for entry in waiting)
    pools = tuple(
        _pool_view(definitions, name, leases, waiting_by_pool.get(name, 0), viewer, now)
        for name in sorted(definitions.pools)
    )
    reservations = tuple(r for r in definitions.reservations if as_utc(r.end) > now and viewer.sees(r.subject))
    return DashboardState(
        now=now,
        pools=pools,
        leases=tuple(lease for lease in leases if viewer.sees(lease.subject)),
        queue=tuple(sorted((w for w in waiting if viewer.sees(w.request.subject)), key=_queue_order)),
        events=tuple(events),
        reservations=tuple(sorted(reservations, key=lambda r: (as_utc(r.start), r.id))),
        timeline=build_timeline(reservations, now),
        utilization=utilization(
            _chart_inputs(definitions, (p.usage for p in pools)), spans, now - timedelta(seconds=window_s), now
        ),
    )
