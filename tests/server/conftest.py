"""Fixtures for the service tests: the API on each store (SQLite file, PostgreSQL scratch database),
clients per role, and a fresh pool/subject/policy per test so that tests sharing one app stay apart."""

from __future__ import annotations

import tempfile
import uuid
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

with warnings.catch_warnings():  # starlette nudges towards httpx2, which the project does not use
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from respools.server import Settings, create_app
from tests.server import pg

ADMIN_TOKEN = "rp_test_admin_token"


@pytest.fixture(scope="session")
def postgres_url_factory() -> Iterator[Any]:
    """Creates scratch databases on demand (skips when PostgreSQL is unreachable) and drops them all."""
    reason = pg.unreachable_reason()
    created: list[str] = []

    def make() -> str:
        if reason is not None:
            pytest.skip(reason)
        name, url = pg.create_database()
        created.append(name)
        return url

    yield make
    for name in created:
        pg.drop_database(name)


def store_url(kind: str, tmp: Path, postgres_url_factory: Any) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp / 'respools.db'}"
    url: str = postgres_url_factory()
    return url


STORES = [pytest.param("sqlite", id="sqlite"), pytest.param("postgres", id="postgres", marks=pytest.mark.postgres)]


def settings_for(url: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": url,
        "admin_token": ADMIN_TOKEN,
        "tick_s": 0.1,
        "election_interval_s": 0.2,
        "token_cache_ttl_s": 30.0,
        "log_json": False,
        "max_wait_s": 30.0,
    }
    return Settings(**(values | overrides))


class Api:
    """A TestClient with helpers for the common set-up steps."""

    def __init__(self, client: TestClient) -> None:
        self.client = client
        self.admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}

    def call(self, method: str, path: str, token: str | None = ADMIN_TOKEN, **kwargs: Any) -> httpx.Response:
        headers = dict(kwargs.pop("headers", {}))
        if token is not None:
            headers.setdefault("Authorization", f"Bearer {token}")
        response: httpx.Response = self.client.request(method, path, headers=headers, **kwargs)
        return response

    def ok(self, method: str, path: str, token: str | None = ADMIN_TOKEN, **kwargs: Any) -> Any:
        response = self.call(method, path, token, **kwargs)
        assert response.status_code < 300, (response.status_code, response.text)
        return response.json() if response.content else None

    def subject_token(self, subject: str) -> str:
        token: str = self.ok("POST", "/v1/tokens", json={"role": "subject", "subject": subject})["token"]
        return token

    def world(
        self,
        capacity: dict[str, float] | None = None,
        hosts: Sequence[dict[str, Any]] = (),
        **pool: Any,
    ) -> World:
        """A fresh pool (with ``hosts`` reported by an agent, if given) with one subject holding a policy
        on it, and that subject's token."""
        suffix = uuid.uuid4().hex[:8]
        world = World(pool=f"pool-{suffix}", subject=f"team-{suffix}", token="")
        capacity = {"gpu": 8} if capacity is None else capacity
        self.ok("PUT", f"/v1/pools/{world.pool}", json={"name": world.pool, "capacity": capacity} | pool)
        for host in hosts:
            self.ok("PUT", f"/v1/pools/{world.pool}/hosts/{host['name']}?ttl_s=30", json=host)
        self.ok("PUT", f"/v1/subjects/{world.subject}", json={"name": world.subject})
        self.ok(
            "POST",
            "/v1/policies",
            json={"subject": world.subject, "pool": world.pool, "reserved": {"gpu": 1 if hosts else 4}, "priority": 10},
        )
        world.token = self.subject_token(world.subject)
        return world

    def add_subject(self, world: World, name: str, **policy: Any) -> str:
        subject = f"{name}-{world.pool.removeprefix('pool-')}"
        self.ok("PUT", f"/v1/subjects/{subject}", json={"name": subject})
        self.ok("POST", "/v1/policies", json={"subject": subject, "pool": world.pool} | policy)
        return self.subject_token(subject)

    def submit(self, token: str, wait: float = 5.0, **spec: Any) -> dict[str, Any]:
        response = self.call("POST", f"/v1/requests?wait={wait}", token, json=spec)
        assert response.status_code in (200, 201), response.text
        body: dict[str, Any] = response.json()
        return body

    def wait_state(self, token: str, request_id: str, leave: str, timeout: float = 10.0) -> dict[str, Any]:
        body: dict[str, Any] = self.ok("GET", f"/v1/requests/{request_id}/wait?state={leave}&timeout={timeout}", token)
        return body


@dataclass
class World:
    pool: str
    subject: str
    token: str


@pytest.fixture(scope="module", params=STORES)
def api(request: pytest.FixtureRequest, postgres_url_factory: Any) -> Iterator[Api]:
    """One app per store for a whole test module; tests isolate themselves with :meth:`Api.world`."""
    with tempfile.TemporaryDirectory() as tmp:
        url = store_url(request.param, Path(tmp), postgres_url_factory)
        app = create_app(settings_for(url))
        with TestClient(app) as client:
            yield Api(client)
