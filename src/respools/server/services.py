"""Everything one server process runs, wired together: store, caches, change bus and listener,
reconciler, metrics. The app factory builds one :class:`Services`; the lifespan starts and stops it."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError
from starlette.concurrency import run_in_threadpool

from respools.model import Request
from respools.server.auth import TokenCache
from respools.server.backends import WorkloadStopper
from respools.server.batched_reads import BatchedReads
from respools.server.changes import ChangeBus
from respools.server.db.database import Database, DatabaseUnavailable
from respools.server.db.group_commit import GroupCommit
from respools.server.db.migrate import current_revision, head_revision, upgrade
from respools.server.db.statements import REQUEST_STATES
from respools.server.definitions import DefinitionsCache
from respools.server.listener import PgListener
from respools.server.metrics import Metrics
from respools.server.ops.leases import confirm_stop
from respools.server.ops.requests import fetch_many
from respools.server.ops.status import pool_statuses
from respools.server.ops.tokens import bootstrap_admin_token, ensure_admin_token
from respools.server.reconciler import Reconciler
from respools.server.reconciler.loop import Role
from respools.server.renewals import Renewals
from respools.server.settings import Settings
from respools.server.usage_metrics import UsageCollector
from respools.server.usage_rollup import RollupWorker
from respools.server.watchers import EventFeed, RequestWatch

log = logging.getLogger(__name__)

STARTUP_DEADLINE_S = 60.0
RECHECK_CHUNK = 1000
"""Request ids per recheck statement."""


@dataclass
class Services:
    settings: Settings
    db: Database
    bus: ChangeBus
    definitions: DefinitionsCache
    tokens: TokenCache
    metrics: Metrics
    reconciler: Reconciler
    stopper: WorkloadStopper
    writes: GroupCommit
    """The hot path's writes (submit, heartbeat, release), committed in batches."""
    renewals: Renewals
    """Heartbeats renewed in memory, written once per interval."""
    request_reads: BatchedReads[Request]
    """Long-polls read their request together."""
    rollup: RollupWorker | None = None
    """Sums ended leases into the usage roll-up while this process leads."""
    listener: PgListener | None = None
    request_watch: RequestWatch | None = None
    event_feed: EventFeed | None = None
    started: bool = False
    _unsubscribe: list[object] = field(default_factory=list)

    @classmethod
    def build(cls, settings: Settings) -> Services:
        bus = ChangeBus()
        db = Database(settings, bus)
        definitions = DefinitionsCache(db)
        tokens = TokenCache(db, settings.token_cache_ttl_s)
        metrics = Metrics()
        stopper = WorkloadStopper(lambda lease_id, confirmation: confirm_stop(db, lease_id, confirmation))
        reconciler = Reconciler(db, definitions, settings, metrics, stopper)
        writes = GroupCommit(db)
        renewals = Renewals(db, writes, definitions)
        reads = BatchedReads(db, fetch_many)
        services = cls(settings, db, bus, definitions, tokens, metrics, reconciler, stopper, writes, renewals, reads)
        bus.subscribe(definitions.on_changes)
        bus.subscribe(tokens.on_changes)
        bus.subscribe(reconciler.on_changes)
        metrics.add_pool_collector(lambda: pool_statuses(db, definitions))
        metrics.registry.register(UsageCollector(db))
        if settings.run_reconciler:
            services.rollup = RollupWorker(db, lambda: reconciler.role == Role.LEADER, settings.usage_rollup_s)
        if db.is_postgres:
            services.listener = PgListener(db.url, bus)
        return services

    def start(self) -> None:
        """Migrate, make sure an admin token exists, and start the listener and the reconciler."""
        self._migrate()
        if self.settings.admin_token:
            ensure_admin_token(self.db, self.settings.admin_token)
        token = bootstrap_admin_token(self.db)
        if token is not None:
            print(
                "respools: first start — bootstrap admin token (shown once; store it now):\n"
                f"  {token}\n  use it as: Authorization: Bearer <token>, or RESPOOLS_TOKEN=<token>",
                file=sys.stdout,
                flush=True,
            )
            log.warning("issued the bootstrap admin token (printed once on stdout)")
        if self.listener is not None:
            self.listener.start()
        self.reconciler.start()
        if self.rollup is not None:
            self.rollup.start()
        self.started = True

    def attach_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        watch = self.request_watch = RequestWatch(loop)
        self.metrics.long_polls.set_function(lambda: watch.long_polls)
        self.event_feed = EventFeed(loop)
        self.bus.subscribe(self.request_watch.on_changes)
        self.bus.subscribe(self.event_feed.on_changes)

    async def recheck_waiters(self) -> None:
        """Until cancelled: every ``settings.recheck_s``, wake the long-polls whose request left the state they wait
        on without this process hearing of it (:meth:`RequestWatch.recheck`). One read per thousand
        watched requests per interval, where each long-poll used to re-read its own request."""
        while True:
            await asyncio.sleep(self.settings.recheck_s)
            watch = self.request_watch
            if watch is None:
                continue
            mark, ids = watch.mark(), watch.watched()
            if not ids:
                continue
            try:
                states = await run_in_threadpool(self.db.read, lambda conn, ids=ids: _request_states(conn, ids))
            except (DatabaseUnavailable, DBAPIError) as exc:
                log.warning("could not recheck the watched requests (%s); retrying", exc)
                continue
            woken = watch.recheck(states, mark)
            if woken:
                log.info("woke %d long-polls whose notification was lost", woken)

    def stop(self) -> None:
        if self.rollup is not None:
            self.rollup.stop()
        self.reconciler.stop()
        if self.listener is not None:
            self.listener.stop()
        self.stopper.shutdown()
        self.writes.stop()
        self.db.dispose()
        self.started = False

    def _migrate(self) -> None:
        deadline = time.monotonic() + STARTUP_DEADLINE_S
        while True:
            try:
                upgrade(self.db.write_engine)
                return
            except (DBAPIError, DatabaseUnavailable) as exc:
                if time.monotonic() > deadline:
                    raise
                log.warning("database not reachable yet; retrying", extra={"error": str(exc).splitlines()[0]})
                time.sleep(1.0)

    def schema_revision(self) -> str | None:
        def read(conn: sa.Connection) -> str | None:
            return current_revision(conn)

        return self.db.read(read)

    @staticmethod
    def expected_revision() -> str:
        return head_revision()


def _request_states(conn: sa.Connection, ids: list[str]) -> dict[str, str | None]:
    """The state of each of ``ids``; ``None`` for a request no longer stored."""
    states: dict[str, str | None] = dict.fromkeys(ids)
    for start in range(0, len(ids), RECHECK_CHUNK):
        rows = conn.execute(REQUEST_STATES, {"k_ids": ids[start : start + RECHECK_CHUNK]})
        states.update({row.id: row.state for row in rows})
    return states
