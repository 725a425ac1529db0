"""Lease-scoped tokens: a job's credential acts on its own lease only, and ends with it."""

from __future__ import annotations

from tests.server.conftest import Api

ADMIN = "rp_test_admin_token"


def test_a_lease_token_heartbeats_reads_and_releases_its_own_lease(api: Api) -> None:
    world = api.world()
    request = api.submit(world.token, resources={"gpu": 1})
    issued = api.ok("POST", f"/v1/leases/{request['lease_id']}/token", world.token)
    token = issued["token"]
    assert issued["lease_id"] == request["lease_id"] and issued["subject"] == world.subject

    assert api.ok("GET", "/v1/whoami", token)["lease_id"] == request["lease_id"]
    assert api.ok("POST", f"/v1/leases/{request['lease_id']}/heartbeat", token)["state"] == "active"
    assert api.ok("GET", f"/v1/leases/{request['lease_id']}", token)["state"] == "active"
    assert api.ok("POST", f"/v1/leases/{request['lease_id']}/release", token)["state"] == "released"

    ended = api.call("POST", f"/v1/leases/{request['lease_id']}/heartbeat", token)
    assert ended.status_code == 401
    assert "ended with its lease" in ended.json()["detail"] and "released" in ended.json()["detail"]


def test_a_lease_token_is_refused_on_any_other_lease_or_call(api: Api) -> None:
    world = api.world()
    mine = api.submit(world.token, resources={"gpu": 1})
    sibling = api.submit(world.token, resources={"gpu": 1})  # same subject: its own token could touch it
    token = api.ok("POST", f"/v1/leases/{mine['lease_id']}/token", world.token)["token"]

    for method, path in [
        ("POST", f"/v1/leases/{sibling['lease_id']}/heartbeat"),
        ("POST", f"/v1/leases/{sibling['lease_id']}/release"),
        ("GET", f"/v1/leases/{sibling['lease_id']}"),
        ("GET", "/v1/leases"),
        ("POST", "/v1/requests"),
        ("POST", f"/v1/leases/{mine['lease_id']}/token"),  # no minting more
        ("POST", f"/v1/leases/{mine['lease_id']}/preempt"),
        ("GET", "/v1/tokens"),
        ("PUT", f"/v1/pools/{world.pool}"),
    ]:
        refused = api.call(method, path, token, json={})
        assert refused.status_code == 403, (method, path, refused.text)
        assert f"scoped to lease {mine['lease_id']}" in refused.json()["detail"], refused.text
    assert api.ok("GET", f"/v1/leases/{sibling['lease_id']}", world.token)["state"] == "granted"


def test_only_the_leases_subject_or_an_admin_gets_a_token_and_only_while_it_is_held(api: Api) -> None:
    mine, theirs = api.world(), api.world()
    request = api.submit(theirs.token, resources={"gpu": 1})
    refused = api.call("POST", f"/v1/leases/{request['lease_id']}/token", mine.token)
    assert refused.status_code == 403 and theirs.subject in refused.json()["detail"]
    assert api.ok("POST", f"/v1/leases/{request['lease_id']}/token", ADMIN)["subject"] == theirs.subject

    api.ok("POST", f"/v1/leases/{request['lease_id']}/release", theirs.token)
    late = api.call("POST", f"/v1/leases/{request['lease_id']}/token", theirs.token)
    assert late.status_code == 409 and "released" in late.json()["detail"]
    assert api.call("POST", "/v1/leases/lse_nope/token", theirs.token).status_code == 404
