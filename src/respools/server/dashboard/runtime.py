"""The dashboard's parts of one server process, started and stopped with it (see ``routes.lifespan``):
the session codec, the token-id directory and the change feed of the live streams (the utilization
charts keep no state here: they read the usage ledger, see :mod:`utilization`)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from starlette.concurrency import run_in_threadpool

from respools.server.auth import TOKENS_TOPIC
from respools.server.changes import Changes
from respools.server.dashboard import store
from respools.server.dashboard.feed import ChangeFeed
from respools.server.dashboard.render import Renderer
from respools.server.dashboard.session import SessionCodec, load_or_create_key
from respools.server.dashboard.settings import DashboardSettings
from respools.server.db.database import Database
from respools.server.schemas import Principal
from respools.server.services import Services


class Principals:
    """Token id → principal (what a session resolves to), cached for ``ttl_s`` and forgotten as soon as
    any token is revoked, so a revoked token's sessions end at once on every replica."""

    def __init__(self, db: Database, ttl_s: float) -> None:
        self._db = db
        self._ttl_s = ttl_s
        self._entries: dict[str, tuple[Principal | None, float]] = {}
        self._lock = threading.Lock()

    def on_changes(self, changes: Changes) -> None:
        if TOKENS_TOPIC in changes.config or changes.resync:
            with self._lock:
                self._entries.clear()

    def cached(self, token_id: str) -> tuple[bool, Principal | None]:
        """``(known, principal)``: whether the cache can answer, and its answer."""
        entry = self._entries.get(token_id)
        if entry is not None and entry[1] > time.monotonic():
            return True, entry[0]
        return False, None

    def lookup(self, token_id: str) -> Principal | None:
        principal = self._db.read(lambda conn: store.principal_by_token_id(conn, token_id))
        with self._lock:
            self._entries[token_id] = (principal, time.monotonic() + self._ttl_s)
        return principal

    async def resolve(self, token_id: str) -> Principal | None:
        known, principal = self.cached(token_id)
        if known:
            return principal
        return await run_in_threadpool(self.lookup, token_id)


@dataclass
class Dashboard:
    services: Services
    settings: DashboardSettings
    sessions: SessionCodec
    principals: Principals
    feed: ChangeFeed
    renderer: Renderer
    _unsubscribe: list[Callable[[], None]] = field(default_factory=list)

    @classmethod
    async def start(cls, services: Services, settings: DashboardSettings) -> Dashboard:
        """Build and start the dashboard of a process whose services have started (the store is migrated)."""
        key = await run_in_threadpool(load_or_create_key, services.db)
        dashboard = cls(
            services=services,
            settings=settings,
            sessions=SessionCodec(key, settings.session_hours * 3600),
            principals=Principals(services.db, max(1.0, services.settings.token_cache_ttl_s)),
            feed=ChangeFeed(
                asyncio.get_running_loop(),
                lambda: services.db.read(store.queue_fingerprint),
                settings.queue_poll_s,
            ),
            renderer=Renderer(),
        )
        for subscriber in (dashboard.principals.on_changes, dashboard.feed.on_changes):
            dashboard._unsubscribe.append(services.bus.subscribe(subscriber))
        return dashboard

    async def stop(self) -> None:
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._unsubscribe.clear()
        await self.feed.close()
