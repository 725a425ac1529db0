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


def put_lease(client: TestClient, subject: str, pool: str, gpus: int, borrowed: int, hours: float) -> None:
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
        "granted_at": T0,
        "released_at": T0 + timedelta(hours=hours),
        "expires_at": T0 + timedelta(days=1),
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
        "gpu_hours_preempted": "0.0000", "gpu_hours": "8.0000", "cost": "20.00",
    }  # fmt: skip
    assert rows["nlp"]["gpu_hours"] == "6.0000" and rows["nlp"]["cost"] == ""

    bad = client.get("/ui/usage.csv", params=WINDOW | {"price": ["a100=cheap"]})
    assert bad.status_code == 422 and "price" in bad.text

    ok(client, "PUT", "/v1/subjects/nlp", json={"name": "nlp"})
    token, _ = new_token(client, "subject", "nlp")
    sign_in(client, token)
    own = list(csv.DictReader(io.StringIO(client.get("/ui/usage.csv", params=WINDOW).text)))
    assert [r["subject"] for r in own] == ["nlp"]
