"""Two server processes on one PostgreSQL database answer ``GET /v1/usage`` — and the dashboard's
utilization series (``GET /ui/utilization.json``) — with the same figures, and a replica started after
the others have stopped answers the same again: both come from committed lease rows, not from anything
a process keeps."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.server import pg
from tests.server.servers import ServerProcess, start_server, wait_ready

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

ADMIN = "rp_usage_admin"
HEADERS = {"Authorization": f"Bearer {ADMIN}"}


@pytest.fixture
def database() -> Iterator[str]:
    reason = pg.unreachable_reason()
    if reason:
        pytest.skip(reason)
    with pg.scratch_database("respools_test_usage") as url:
        yield url


def call(server: ServerProcess, method: str, path: str, **kwargs: Any) -> Any:
    response = httpx.request(method, server.url + path, headers=HEADERS, timeout=30.0, **kwargs)
    assert response.status_code < 300, response.text
    return response.json()


def hold_and_release(server: ServerProcess, gpus: int) -> None:
    request = call(
        server,
        "POST",
        "/v1/requests?wait=10",
        json={"subject": "team", "resources": {"gpu": gpus}, "preemptible": True},
    )
    assert request["state"] == "granted", request
    call(server, "POST", f"/v1/leases/{request['lease_id']}/release")


def utilization(server: ServerProcess, until: str) -> Any:
    """The utilization charts' series, and the Usage page's chargeback rows, through a dashboard session
    signed in on this replica."""
    with httpx.Client(base_url=server.url, timeout=30.0) as client:
        login = client.post(
            "/ui/login",
            content=f"token={ADMIN}",
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert login.status_code == 303, login.text  # to the page, with the session cookie
        response = client.get("/ui/utilization.json", params={"until": until})
        assert response.status_code == 200, response.text
        page = client.get("/usage", params={"days": 1})
        assert page.status_code == 200, page.text
        rows = re.findall(r'<tr data-subject="[^"]+" data-pool="[^"]+" data-gpu-hours="[^"]+">', page.text)
        assert rows, "the Usage page lists the team's GPU-hours"
        return response.json() | {"chargeback": rows}


def test_replicas_and_a_restart_agree(database: str, tmp_path: Path) -> None:
    first, second = (start_server(database, ADMIN, tmp_path) for _ in range(2))
    try:
        wait_ready(first)
        wait_ready(second)
        call(first, "PUT", "/v1/pools/gpus", json={"name": "gpus", "capacity": {"gpu": 8}})
        call(first, "PUT", "/v1/subjects/team", json={"name": "team"})
        call(first, "POST", "/v1/policies", json={"subject": "team", "pool": "gpus", "reserved": {"gpu": 2}})
        hold_and_release(first, 3)
        hold_and_release(second, 1)
        window = {
            "since": (datetime.now(UTC) - timedelta(hours=1)).isoformat(),
            "until": datetime.now(UTC).isoformat(),
            "by": "subject,pool,hour",
        }
        answers = [call(server, "GET", "/v1/usage", params=window) for server in (first, second)]
        assert answers[0] == answers[1]
        assert sum(row["borrowed"].get("gpu", 0) for row in answers[0]["rows"]) > 0, "the 3-GPU lease borrowed 1"
        series = [utilization(server, window["until"]) for server in (first, second)]
        assert series[0] == series[1]
        pool = next(s for s in series[0]["series"] if s["key"] == ["pool", "gpus", "gpu"])
        assert max(v for _, v in pool["in_share"]) == 2000 and max(v for _, v in pool["borrowed"]) == 1000
        assert pool["in_share"][-1][1] == 0 and pool["capacity"] == [[pool["in_share"][0][0], 8000]]
    finally:
        first.stop()
        second.stop()
    restarted = start_server(database, ADMIN, tmp_path)
    try:
        wait_ready(restarted)
        assert call(restarted, "GET", "/v1/usage", params=window) == answers[0]
        assert utilization(restarted, window["until"]) == series[0]
    finally:
        restarted.stop()
