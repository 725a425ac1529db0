"""The ASGI application: ``create_app(settings)`` for embedding and tests, ``app_from_env`` for
uvicorn's factory mode (``respools server`` and multi-worker deployments)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from anyio import to_thread
from fastapi import APIRouter, FastAPI
from prometheus_client import Counter
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from respools import __version__
from respools.server import dashboard
from respools.server.errors import install_error_handlers
from respools.server.gc_tuning import collect_when_due, tune_for_serving, tuned_for_serving
from respools.server.input_guard import InputGuard
from respools.server.log_format import configure_logging
from respools.server.metrics import Metrics
from respools.server.routes import (
    definitions,
    events,
    health,
    leases,
    policies,
    pools,
    requests,
    reservations,
    subjects,
    tokens,
    usage,
)
from respools.server.services import Services
from respools.server.settings import Settings

DESCRIPTION = """GPU resource pools for ML pipelines.

Every pipeline step asks for a **lease** on a pool's capacity (`POST /v1/requests`), keeps it alive with
heartbeats, and releases it. Errors are JSON `{"detail", "field"}` with the field at fault.
Authenticate with `Authorization: Bearer <token>`."""

TAGS = [
    {"name": "requests", "description": "What steps ask for; long-poll `wait` until a decision."},
    {"name": "leases", "description": "Granted capacity: heartbeat, release, preemption."},
    {"name": "pools", "description": "Capacity on a stack, its hosts, draining and status."},
    {"name": "policies", "description": "A subject's reserved share, limit, priority and weight in a pool."},
    {"name": "subjects", "description": "Teams, projects or components that consume capacity."},
    {"name": "reservations", "description": "Guaranteed capacity in a time window."},
    {"name": "tokens", "description": "Bearer tokens and roles (admin, subject, viewer)."},
    {"name": "definitions", "description": "Many definition changes at once, all or nothing (`respools apply`)."},
    {"name": "events", "description": "The log of grants, rejections, preemptions, expiries and requeues."},
    {"name": "usage", "description": "GPU-seconds and other keys per subject, pool and day/hour, from the leases."},
    {"name": "operations", "description": "Health, readiness and Prometheus metrics."},
]


class HttpMetricsMiddleware:
    """Counts answers by method, route template and status (templates, so ids do not explode labels)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics
        self._counters: dict[tuple[str, str, int], Counter] = {}
        """Each label set's child counter: looking it up through ``labels()`` on every request cost more
        than the rest of this middleware."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500

        async def record(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, record)
        finally:
            route = scope.get("route")
            key = (scope["method"], getattr(route, "path", "unmatched"), status)
            counter = self._counters.get(key)
            if counter is None:
                counter = self._counters[key] = self.metrics.http_requests.labels(key[0], key[1], str(status))
            counter.inc()


_NO_LIFESPAN = type(APIRouter().lifespan_context)
"""The type of lifespan a router has when it was given none."""


def add_routes(app: FastAPI, router: APIRouter) -> None:
    """Serve ``router``'s routes as the app's own, as ``include_router`` did before FastAPI 0.141.

    Since 0.141 an included router stays a router of its own, and every request walks it to find its
    route and then builds that route's handler anew (it works out again which of the endpoint's
    parameters come from where). That cost about a tenth of the API's CPU per lease lifecycle. A
    router's routes are complete once declared (path with the router's prefix, tags, error responses,
    the router's dependencies) and build their handler once, so they are added as they are. What this
    does not carry over is a router's lifespan (the dashboard's goes through ``include_router``) and
    ``app.dependency_overrides``, which respools does not use: tests run the real dependencies."""
    if router.on_startup or router.on_shutdown or type(router.lifespan_context) is not _NO_LIFESPAN:
        raise ValueError("a router with a lifespan of its own must be included with include_router")
    app.router.routes.extend(router.routes)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    services: Services = app.state.services
    # Blocking store calls run on anyio's thread pool. A few threads keep the database busy; dozens
    # only fight over the GIL (measured: 40 threads cost ~30% more CPU per request than 8).
    to_thread.current_default_thread_limiter().total_tokens = services.settings.worker_threads
    services.attach_loop(asyncio.get_running_loop())
    await run_in_threadpool(services.start)
    recheck = asyncio.create_task(services.recheck_waiters(), name="respools-recheck-waiters")
    renewals = asyncio.create_task(services.renewals.run(), name="respools-renewals")
    collector = asyncio.create_task(collect_when_due(), name="respools-gc") if tuned_for_serving() else None
    try:
        yield
    finally:
        if collector is not None:
            collector.cancel()
        recheck.cancel()
        renewals.cancel()  # its last flush writes what it still holds
        with contextlib.suppress(asyncio.CancelledError):
            await renewals
        await run_in_threadpool(services.stop)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings.from_env()
    app = FastAPI(
        title="respools",
        version=__version__,
        description=DESCRIPTION,
        openapi_tags=TAGS,
        lifespan=lifespan,
    )
    services = Services.build(settings)
    app.state.services = services
    install_error_handlers(app)
    for module in (
        requests,
        leases,
        pools,
        policies,
        subjects,
        reservations,
        tokens,
        definitions,
        events,
        usage,
        health,
    ):
        add_routes(app, module.router)
    app.include_router(dashboard.router)
    app.add_middleware(InputGuard, max_body_bytes=settings.max_body_bytes)
    app.add_middleware(HttpMetricsMiddleware, metrics=services.metrics)  # outermost: counts the guard's answers
    return app


def app_from_env() -> FastAPI:
    """uvicorn factory: settings from ``RESPOOLS_*``, JSON logs configured, the garbage collector set for
    serving (see :mod:`.gc_tuning`): what this builds is the process's app."""
    settings = Settings.from_env()
    configure_logging(settings.log_level, settings.log_json, settings.access_log)
    app = create_app(settings)
    tune_for_serving()
    return app
