"""``GET /v1/usage``: exact key-seconds for constructed lease histories, auth scoping, bounds, and a real
lease granted and released through the API showing up in the ledger."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from respools.server.db.tables import LeaseRow, table
from tests.server.conftest import Api

T0 = datetime(2024, 3, 1, 10, 30, tzinfo=UTC)
WINDOW = {"since": "2024-03-01T00:00:00Z", "until": "2024-03-03T00:00:00Z"}


def put_lease(api: Api, subject: str, pool: str, **fields: Any) -> None:
    row = {
        "id": uuid.uuid4().hex,
        "request_id": uuid.uuid4().hex,
        "subject": subject,
        "pool": pool,
        "stack": "local",
        "state": "released",
        "borrowed": {},
        "placement": {},
        "preemptible": True,
        "labels": {},
        "expires_at": T0 + timedelta(days=30),
    } | fields
    db = api.client.app.state.services.db  # type: ignore[attr-defined]
    db.write(lambda tx: tx.conn.execute(table(LeaseRow).insert().values(**row)))


@pytest.fixture
def history(api: Api) -> dict[str, str]:
    """Two subjects on one pool: a 2-GPU lease with 1 GPU borrowed for 1 h 30 min, spanning 11:00; a
    preempted 4-GPU lease for 30 min that reported a checkpoint 20 min in; and (for the other subject) a
    half-GPU lease for 2 h on day 2."""
    suffix = uuid.uuid4().hex[:8]
    names = {"a": f"ua-{suffix}", "b": f"ub-{suffix}", "pool": f"up-{suffix}"}
    put_lease(
        api, names["a"], names["pool"], resources={"gpu": 2000, "mcpu": 4000}, borrowed={"gpu": 1000},
        granted_at=T0, released_at=T0 + timedelta(minutes=90),
    )  # fmt: skip
    put_lease(
        api, names["a"], names["pool"], resources={"gpu": 4000}, state="preempted",
        granted_at=T0 + timedelta(hours=2), released_at=T0 + timedelta(hours=2, minutes=30),
        checkpointed_at=T0 + timedelta(hours=2, minutes=20), checkpoints=3,
    )  # fmt: skip
    put_lease(
        api, names["b"], names["pool"], resources={"gpu": 500},
        granted_at=T0 + timedelta(days=1), released_at=T0 + timedelta(days=1, hours=2),
    )  # fmt: skip
    return names


def usage(api: Api, token: str | None = None, **params: Any) -> list[dict[str, Any]]:
    body = api.ok(
        "GET",
        "/v1/usage",
        token=token or api.admin["Authorization"].split()[1],
        params={k: v for k, v in (WINDOW | params).items() if v is not None},
    )
    rows: list[dict[str, Any]] = body["rows"]
    return rows


def test_in_share_and_borrowed_split_per_subject(api: Api, history: dict[str, str]) -> None:
    rows = {r["subject"]: r for r in usage(api, by="subject,pool") if r["pool"] == history["pool"]}
    a, b = rows[history["a"]], rows[history["b"]]
    # 1 GPU in share for 5400 s + 4 GPUs for 1800 s; 1 GPU borrowed for 5400 s
    assert a["in_share"] == {"gpu": 5400 + 7200, "mcpu": 4000 * 5400}
    assert a["borrowed"] == {"gpu": 5400}
    assert a["preempted"] == {"gpu": 7200}
    assert a["lost"] == {"gpu": 4 * 600}  # the 10 minutes since its checkpoint
    assert b["lost"] == {}
    assert a["total"]["gpu"] == 18000
    assert b["in_share"] == {"gpu": 3600} and b["borrowed"] == {} and b["preempted"] == {}


def test_a_lease_spanning_an_hour_boundary_is_split_exactly(api: Api, history: dict[str, str]) -> None:
    rows = [r for r in usage(api, by="subject,hour", subject=history["a"])]
    by_hour = {r["bucket"][11:16]: r["total"]["gpu"] for r in rows}
    # 10:30-12:00 at 2 GPUs, then 12:30-13:00 at 4 GPUs
    assert by_hour == {"10:00": 1800 * 2, "11:00": 3600 * 2, "12:00": 1800 * 4}


def test_days_and_a_clipped_window(api: Api, history: dict[str, str]) -> None:
    days = {r["bucket"][:10]: r["total"]["gpu"] for r in usage(api, by="day", subject=history["b"])}
    assert days == {"2024-03-02": 3600}
    clipped = usage(api, by="subject", subject=history["a"], since="2024-03-01T11:00:00Z", until="2024-03-01T12:45:00Z")
    assert clipped[0]["total"]["gpu"] == 3600 * 2 + 900 * 4


def test_a_running_lease_counts_up_to_now(api: Api) -> None:
    subject, pool = f"ur-{uuid.uuid4().hex[:8]}", f"up-{uuid.uuid4().hex[:8]}"
    started = datetime.now(UTC) - timedelta(minutes=10)
    put_lease(api, subject, pool, resources={"gpu": 1000}, state="active", granted_at=started)
    (row,) = usage(api, by="subject", subject=subject, since=(started - timedelta(hours=1)).isoformat(), until=None)
    assert 600 <= row["total"]["gpu"] < 660


def test_a_subject_token_sees_only_its_own(api: Api, history: dict[str, str]) -> None:
    api.ok("PUT", f"/v1/subjects/{history['a']}", json={"name": history["a"]})
    token = api.subject_token(history["a"])
    mine = usage(api, token=token, by="subject")
    assert [r["subject"] for r in mine] == [history["a"]]
    response = api.call("GET", "/v1/usage", token, params=WINDOW | {"subject": history["b"]})
    assert response.status_code == 403


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"by": "team"}, "by"),
        ({"by": "day,hour"}, "by"),
        ({"by": "pool,pool"}, "by"),
        ({"since": "2024-03-02T00:00:00Z", "until": "2024-03-01T00:00:00Z"}, "since"),
        ({"since": "2020-01-01T00:00:00Z", "until": "2024-03-01T00:00:00Z"}, "since"),
        ({"since": "2024-01-01T00:00:00Z", "until": "2024-06-01T00:00:00Z", "by": "hour"}, "by"),
        ({"since": "yesterday"}, "since"),
    ],
)
def test_bad_parameters_are_422s_naming_the_field(api: Api, params: dict[str, str], field: str) -> None:
    response = api.call("GET", "/v1/usage", params=WINDOW | params)
    assert response.status_code == 422, response.text
    assert field in response.text


def test_a_real_lease_shows_up(api: Api) -> None:
    world = api.world()
    request = api.submit(world.token, resources={"gpu": 6}, preemptible=True)
    lease = api.ok("POST", f"/v1/leases/{request['lease_id']}/release", world.token)
    held = (datetime.fromisoformat(lease["released_at"]) - datetime.fromisoformat(lease["granted_at"])).total_seconds()
    since = (datetime.now(UTC) - timedelta(days=1)).isoformat()
    (row,) = usage(api, token=world.token, by="subject,pool", since=since, until=None)
    assert row["pool"] == world.pool and row["leases"] == 1
    # the world's policy reserves 4 GPUs: 4 in share and 2 borrowed for as long as the lease was held
    assert row["in_share"]["gpu"] == pytest.approx(4 * held, abs=0.002)
    assert row["borrowed"]["gpu"] == pytest.approx(2 * held, abs=0.002)


def test_prometheus_counters_come_from_the_same_ledger(api: Api, history: dict[str, str]) -> None:
    metrics = api.client.get("/metrics").text
    labels = f'pool="{history["pool"]}",subject="{history["a"]}"'
    for kind, seconds in (("in_share", 12600.0), ("borrowed", 5400.0), ("preempted", 7200.0), ("lost", 2400.0)):
        assert f'respools_usage_gpu_seconds_total{{kind="{kind}",{labels}}} {seconds}' in metrics, kind


def test_a_checkpoint_report_splits_preempted_work_into_lost_and_kept(api: Api) -> None:
    """``POST /v1/leases/{id}/checkpoint`` by the holder (also while preempting): the ledger's ``lost`` is
    the time since the last report; another subject, a viewer and an ended lease are refused."""
    world = api.world()
    other = api.add_subject(world, "other", reserved={"gpu": 1})
    viewer = api.ok("POST", "/v1/tokens", json={"role": "viewer"})["token"]
    request = api.submit(world.token, resources={"gpu": 2}, preemptible=True)
    path = f"/v1/leases/{request['lease_id']}/checkpoint"
    first = api.ok("POST", path, world.token)
    assert first["checkpoints"] == 1 and first["checkpointed_at"] is not None
    assert api.call("POST", path, other).status_code == 403
    assert api.call("POST", path, viewer).status_code == 403
    api.ok("POST", f"/v1/leases/{request['lease_id']}/preempt", json={"grace_s": 30})
    second = api.ok("POST", path, world.token)  # checkpointing on notice is the point of the grace period
    assert second["checkpoints"] == 2 and second["checkpointed_at"] >= first["checkpointed_at"]
    lease = api.ok("POST", f"/v1/leases/{request['lease_id']}/release", world.token)
    assert lease["state"] == "preempted" and lease["checkpointed_at"] == second["checkpointed_at"]
    ended = api.call("POST", path, world.token)
    assert ended.status_code == 409 and "lease_id" in ended.text
    assert api.call("POST", "/v1/leases/no-such-lease/checkpoint", world.token).status_code == 404

    def seconds(end: str, start: str) -> float:
        return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()

    since = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    (row,) = usage(api, token=world.token, by="subject,pool", since=since, until=None)
    assert row["preempted"]["gpu"] == pytest.approx(2 * seconds(lease["released_at"], lease["granted_at"]), abs=0.002)
    assert row["lost"]["gpu"] == pytest.approx(2 * seconds(lease["released_at"], lease["checkpointed_at"]), abs=0.002)
    assert row["lost"]["gpu"] < row["preempted"]["gpu"]
