"""The dashboard's chargeback download (``GET /ui/usage.csv``): GPU-hours per team and pool from the
usage ledger, a cost where a price is given, only its own team for a subject session."""

from __future__ import annotations

import csv
import io
import tempfile
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from respools.server import Settings, create_app
from respools.server.db.tables import LeaseRow, table
from tests.dashboard.test_access import ADMIN, new_token, ok, sign_in

T0 = datetime(2024, 5, 1, 9, tzinfo=UTC)
WINDOW = {"since": "2024-05-01T00:00:00Z", "until": "2024-05-02T00:00:00Z"}


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(database_url=f"sqlite:///{Path(tmp) / 'respools.db'}", admin_token=ADMIN, log_json=False)
        with TestClient(create_app(settings)) as test_client:
            yield test_client


def put_lease(
    client: TestClient, subject: str, pool: str, gpus: int, borrowed: int, hours: float, at: datetime = T0
) -> None:
    row = {
        "id": uuid.uuid4().hex,
        "request_id": uuid.uuid4().hex,
        "subject": subject,
        "pool": pool,
        "stack": "local",
        "state": "released",
        "resources": {"gpu": gpus * 1000},
        "borrowed": {"gpu": borrowed * 1000} if borrowed else {},
        "placement": {},
        "preemptible": True,
        "labels": {},
        "granted_at": at,
        "released_at": at + timedelta(hours=hours),
        "expires_at": at + timedelta(days=1),
    }
    db = client.app.state.services.db  # type: ignore[attr-defined]
    db.write(lambda tx: tx.conn.execute(table(LeaseRow).insert().values(**row)))


def test_chargeback_csv_with_prices_and_scoping(client: TestClient) -> None:
    put_lease(client, "vision", "a100", gpus=4, borrowed=1, hours=2)
    put_lease(client, "nlp", "h100", gpus=2, borrowed=0, hours=3)
    sign_in(client, ADMIN)
    response = client.get("/ui/usage.csv", params=WINDOW | {"price": ["a100=2.5"]})
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/csv")
    assert "attachment" in response.headers["content-disposition"]
    rows = {r["subject"]: r for r in csv.DictReader(io.StringIO(response.text))}
    assert rows["vision"] == {
        "subject": "vision", "pool": "a100", "gpu_hours_in_share": "6.0000", "gpu_hours_borrowed": "2.0000",
        "gpu_hours_preempted": "0.0000", "gpu_hours_lost": "0.0000", "gpu_hours": "8.0000", "cost": "20.00",
    }  # fmt: skip
    assert rows["nlp"]["gpu_hours"] == "6.0000" and rows["nlp"]["cost"] == ""

    bad = client.get("/ui/usage.csv", params=WINDOW | {"price": ["a100=cheap"]})
    assert bad.status_code == 422 and "price" in bad.text

    ok(client, "PUT", "/v1/subjects/nlp", json={"name": "nlp"})
    token, _ = new_token(client, "subject", "nlp")
    sign_in(client, token)
    own = list(csv.DictReader(io.StringIO(client.get("/ui/usage.csv", params=WINDOW).text)))
    assert [r["subject"] for r in own] == ["nlp"]


def test_usage_page_scoping_prices_and_bad_input(client: TestClient) -> None:
    """The Usage page (the browser test checks its figures): a viewer sees every team, a subject
    session only its own; a price in the address is applied; bad input is a 4xx naming the field."""
    now = datetime.now(UTC)
    for subject in ("vision2", "nlp2"):
        ok(client, "PUT", f"/v1/subjects/{subject}", json={"name": subject})
    put_lease(client, "vision2", "a100", gpus=2, borrowed=0, hours=1, at=now - timedelta(hours=3))
    put_lease(client, "nlp2", "a100", gpus=1, borrowed=0, hours=2, at=now - timedelta(hours=3))
    client.cookies.clear()
    assert "Access token" in client.get("/usage").text  # not signed in: the sign-in prompt

    viewer, _ = new_token(client, "viewer")
    sign_in(client, viewer)
    page = client.get("/usage", params={"days": 2, "price": ["a100=10"]})
    assert page.status_code == 200
    assert 'data-subject="vision2" data-pool="a100"' in page.text and 'data-subject="nlp2"' in page.text
    assert '<td class="num cost">20.00</td>' in page.text  # 2 GPU-hours at 10
    assert "price=a100%3D10" in page.text  # the CSV link carries the price

    token, _ = new_token(client, "subject", "nlp2")
    sign_in(client, token)
    own = client.get("/usage", params={"days": 2}).text
    assert 'data-subject="nlp2" data-pool="a100"' in own and 'data-subject="vision2"' not in own

    for params, field in (
        ({"days": 0}, "days"),
        ({"days": 30, "bucket": "hour"}, "days"),
        ({"bucket": "week"}, "bucket"),
        ({"price": "a100=-1"}, "price"),
    ):
        bad = client.get("/usage", params=params)
        assert bad.status_code == 422 and field in bad.text, (params, bad.text)
