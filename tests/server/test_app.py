"""How the API's routers become the app's routes: each documented as its router declared it (the API suite calls
them), and only routers without a lifespan of their own taken in this way."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute

from respools.server.app import add_routes, create_app
from respools.server.routes import events, health, leases, policies, pools, requests, reservations, subjects, tokens
from respools.server.settings import Settings

API_ROUTERS = (requests, leases, pools, policies, subjects, reservations, tokens, events, health)


def test_every_route_is_documented_with_its_routers_tags_and_error_answers(tmp_path: Path) -> None:
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'app.db'}"))
    paths = app.openapi()["paths"]
    declared = [route for module in API_ROUTERS for route in module.router.routes if isinstance(route, APIRoute)]
    assert len(declared) > 30
    for route in declared:
        for method in route.methods or ():
            operation = paths[route.path][method.lower()]
            assert operation["tags"] == route.tags, route.path
            if route.path.startswith("/v1/"):
                assert {"401", "403", "422"} <= set(operation["responses"]), route.path


def test_a_router_with_a_lifespan_of_its_own_is_refused() -> None:
    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield

    with pytest.raises(ValueError, match="include_router"):
        add_routes(FastAPI(), APIRouter(lifespan=lifespan))
