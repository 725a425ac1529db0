"""Roles and tokens: what each role may see and touch, revocation, and the bootstrap admin token."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from respools.server.services import Services
from tests.server.conftest import Api, settings_for


def test_a_subject_sees_only_its_own_requests_and_leases(api: Api) -> None:
    mine = api.world()
    theirs = api.world()
    own = api.submit(mine.token, resources={"gpu": 1})
    other = api.submit(theirs.token, resources={"gpu": 1})

    listed = api.ok("GET", "/v1/requests", mine.token)
    assert {r["subject"] for r in listed} == {mine.subject} and own["id"] in {r["id"] for r in listed}
    assert {lease["subject"] for lease in api.ok("GET", "/v1/leases", mine.token)} == {mine.subject}
    assert {e["subject"] for e in api.ok("GET", "/v1/events", mine.token, params={"limit": 1000})} == {mine.subject}
    assert [s["name"] for s in api.ok("GET", "/v1/subjects", mine.token)] == [mine.subject]

    refused = api.call("POST", f"/v1/leases/{other['lease_id']}/release", mine.token)
    assert refused.status_code == 403 and theirs.subject in refused.json()["detail"]
    assert api.ok("GET", f"/v1/leases/{other['lease_id']}", theirs.token)["state"] == "granted"


def test_a_viewer_reads_everything_and_changes_nothing(api: Api) -> None:
    world = api.world()
    request = api.submit(world.token, resources={"gpu": 1})
    viewer = api.ok("POST", "/v1/tokens", json={"role": "viewer", "description": "dashboard"})["token"]
    assert api.ok("GET", f"/v1/leases/{request['lease_id']}", viewer)["subject"] == world.subject
    assert api.ok("GET", f"/v1/pools/{world.pool}/status", viewer)["live_leases"] == 1
    assert api.call("POST", f"/v1/leases/{request['lease_id']}/release", viewer).status_code == 403
    assert api.call("POST", f"/v1/requests/{request['id']}/cancel", viewer).status_code == 403
    assert api.call("PUT", f"/v1/subjects/{world.subject}", viewer, json={"name": world.subject}).status_code == 403


def test_an_admin_submits_for_a_named_subject(api: Api) -> None:
    world = api.world()
    request = api.submit("rp_test_admin_token", subject=world.subject, resources={"gpu": 1})
    assert request["subject"] == world.subject and request["state"] == "granted"


def test_revoked_tokens_stop_working_at_once(api: Api) -> None:
    world = api.world()
    issued = api.ok("POST", "/v1/tokens", json={"role": "subject", "subject": world.subject})
    assert api.ok("GET", "/v1/whoami", issued["token"])["subject"] == world.subject  # now cached
    listed = api.ok("GET", "/v1/tokens", params={"subject": world.subject})
    assert issued["id"] in {t["id"] for t in listed} and all("token" not in t for t in listed)
    api.ok("DELETE", f"/v1/tokens/{issued['id']}")
    assert api.call("GET", "/v1/whoami", issued["token"]).status_code == 401


@pytest.mark.parametrize("with_env_token", [False, True])
def test_bootstrap_admin_token_is_printed_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], with_env_token: bool
) -> None:
    overrides: dict[str, Any] = {"run_reconciler": False}
    if not with_env_token:
        overrides["admin_token"] = None
    settings = settings_for(f"sqlite:///{tmp_path / 'boot.db'}", **overrides)
    printed = []
    for _ in range(2):
        services = Services.build(settings)
        services.start()
        printed.append(capsys.readouterr().out)
        tokens = services.db.read(lambda conn: conn.exec_driver_sql("SELECT role, description FROM tokens").all())
        services.stop()
    if with_env_token:
        assert printed == ["", ""] and [tuple(t) for t in tokens] == [("admin", "from RESPOOLS_ADMIN_TOKEN")]
    else:
        assert "bootstrap admin token" in printed[0] and printed[1] == ""
        token = printed[0].split("\n")[1].strip()
        assert token.startswith("rp_") and [tuple(t) for t in tokens] == [("admin", "bootstrap admin token")]
