"""Heartbeats renewed in memory: answered at once, written by the next flush, never renewing a lease that
ended meanwhile, and written before the answer whenever the lease is near its stored expiry."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from respools.server.db.database import Tx
from respools.server.lifecycle import update_lease
from respools.server.services import Services
from tests.server.conftest import Api


def _services(api: Api) -> Services:
    services: Services = api.client.app.state.services  # type: ignore[attr-defined]
    return services


def _flush(api: Api) -> int:
    written: int = api.client.portal.call(_services(api).renewals.flush)  # type: ignore[union-attr]
    return written


def _held(api: Api, **pool: Any) -> tuple[str, str]:
    """An active lease (its first heartbeat written) and its holder's token."""
    world = api.world(**pool)
    request = api.submit(world.token, resources={"gpu": 1})
    assert request["state"] == "granted"
    api.ok("POST", f"/v1/leases/{request['lease_id']}/heartbeat", world.token)
    return request["lease_id"], world.token


def _expire_in(api: Api, lease_id: str, seconds: float) -> datetime:
    """Move the lease's stored expiry to ``seconds`` from now (as if its last heartbeat was long ago)."""
    at = datetime.now(UTC) + timedelta(seconds=seconds)

    def work(tx: Tx) -> None:
        update_lease(tx, lease_id, expires_at=at)

    _services(api).db.write(work)
    return at


def _stored(api: Api, lease_id: str) -> dict[str, Any]:
    lease: dict[str, Any] = api.ok("GET", f"/v1/leases/{lease_id}")
    return lease


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def test_a_heartbeat_is_answered_at_once_and_written_by_the_next_flush(api: Api) -> None:
    lease_id, token = _held(api)
    _flush(api)
    before = _expire_in(api, lease_id, 30)
    answered = api.ok("POST", f"/v1/leases/{lease_id}/heartbeat", token)
    assert answered["state"] == "active"
    assert _at(answered["expires_at"]) > before + timedelta(seconds=25), "renewed for the pool's 60 s TTL"
    assert abs(_at(_stored(api, lease_id)["expires_at"]) - before) < timedelta(seconds=1), "held in memory"
    assert _flush(api) == 1
    assert _stored(api, lease_id)["expires_at"] == answered["expires_at"], "the flush writes what was answered"


def test_a_flush_does_not_renew_a_lease_released_meanwhile(api: Api) -> None:
    lease_id, token = _held(api)
    _flush(api)
    _expire_in(api, lease_id, 30)
    api.ok("POST", f"/v1/leases/{lease_id}/heartbeat", token)
    released = api.ok("POST", f"/v1/leases/{lease_id}/release", token)
    _flush(api)
    after = _stored(api, lease_id)
    assert after["state"] == "released"
    assert after["expires_at"] == released["expires_at"]


def test_a_heartbeat_near_its_stored_expiry_or_on_a_short_ttl_is_written_before_it_is_answered(api: Api) -> None:
    lease_id, token = _held(api)
    _flush(api)
    _expire_in(api, lease_id, 5)
    answered = api.ok("POST", f"/v1/leases/{lease_id}/heartbeat", token)
    assert _stored(api, lease_id)["expires_at"] == answered["expires_at"]

    short, short_token = _held(api, lease_ttl_s=10)
    answered = api.ok("POST", f"/v1/leases/{short}/heartbeat", short_token)
    assert _stored(api, short)["expires_at"] == answered["expires_at"]


def test_the_buffered_path_keeps_the_errors_of_the_written_one(api: Api) -> None:
    lease_id, token = _held(api)
    other = api.world()
    assert api.call("POST", f"/v1/leases/{lease_id}/heartbeat", other.token).status_code == 403
    missing = api.call("POST", "/v1/leases/lse_missing/heartbeat", token)
    assert missing.status_code == 404 and missing.json()["field"] == "lease_id"
    api.ok("POST", f"/v1/leases/{lease_id}/release", token)
    assert api.call("POST", f"/v1/leases/{lease_id}/heartbeat", token).status_code == 409
