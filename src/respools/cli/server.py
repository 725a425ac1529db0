"""``respools server``: run the pool service under uvicorn.

Options become ``RESPOOLS_*`` environment variables, so every uvicorn worker process builds the same
settings through :func:`respools.server.app.app_from_env`.
"""

from __future__ import annotations

import os
from typing import Annotated, Any

import typer

from respools.cli import app

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
WORKER_HEALTHCHECK_S = 30
"""How long a worker may go without answering its supervisor's ping before it is replaced."""


@app.command("server")
def server(
    host: Annotated[str, typer.Option(help="address to bind")] = DEFAULT_HOST,
    port: Annotated[int, typer.Option(help="port to bind")] = DEFAULT_PORT,
    database_url: Annotated[
        str | None,
        typer.Option(
            envvar="RESPOOLS_DATABASE_URL",
            help="sqlite:///PATH or postgresql://USER@HOST:PORT/DB (default: SQLite in the user data dir)",
        ),
    ] = None,
    workers: Annotated[int, typer.Option(min=1, help="uvicorn worker processes (PostgreSQL only above 1)")] = 1,
    reconciler: Annotated[bool, typer.Option(help="take part in reconciler leader election")] = True,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error")] = "info",
    json_logs: Annotated[bool, typer.Option("--json-logs/--text-logs", help="log format")] = True,
    access_log: Annotated[bool, typer.Option(help="log every HTTP request")] = False,
) -> None:
    """Run the pool service (REST API, reconciler, metrics)."""
    import uvicorn  # the server extra; imported here so that the client CLI works without it

    from respools.server.listeners import run_workers, spreads_connections
    from respools.server.log_format import configure_logging
    from respools.server.settings import Settings

    overrides = {
        "RESPOOLS_RUN_RECONCILER": str(reconciler).lower(),
        "RESPOOLS_LOG_LEVEL": log_level.upper(),
        "RESPOOLS_LOG_JSON": str(json_logs).lower(),
        "RESPOOLS_ACCESS_LOG": str(access_log).lower(),
    }
    if database_url:
        overrides["RESPOOLS_DATABASE_URL"] = database_url
    os.environ.update(overrides)
    try:
        settings = Settings.from_env()
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--database-url") from exc
    if workers > 1 and not settings.is_postgres:
        raise typer.BadParameter("several workers need PostgreSQL; SQLite serves one process", param_hint="--workers")
    configure_logging(settings.log_level, settings.log_json, settings.access_log)
    options: dict[str, Any] = {
        "app": "respools.server.app:app_from_env",
        "factory": True,
        "host": host,
        "port": port,
        "workers": workers,
        "log_config": None,
        "log_level": log_level.lower(),
        "access_log": access_log,
        "timeout_graceful_shutdown": 5,
        # uvicorn's supervisor kills a worker that does not answer its ping within this many seconds. Its
        # default (5 s) kills workers that are starting up, or saturated, on a busy 2-core host: every
        # connection they held drops, and the replacement meets the same fate.
        "timeout_worker_healthcheck": WORKER_HEALTHCHECK_S,
    }
    config = uvicorn.Config(**options)
    if spreads_connections(config):
        run_workers(config)
    else:
        uvicorn.run(**options)
