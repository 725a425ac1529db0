"""``POST /v1/definitions/apply`` on both stores: changes in order, each seeing the ones before it, and
all or nothing; a refusal names the change and its field, and leaves no row and no event behind."""

from __future__ import annotations

import uuid
from typing import Any

from tests.server.conftest import Api


def test_changes_apply_in_order_and_a_refusal_rolls_back_every_one(api: Api) -> None:
    s = uuid.uuid4().hex[:8]
    pool, team = f"atomic-{s}", f"team-{s}"
    events_before = api.ok("GET", "/v1/events?limit=1000")
    tokens_before = api.ok("GET", "/v1/tokens")
    changes: list[dict[str, Any]] = [
        {"op": "put_pool", "spec": {"name": pool, "capacity": {"gpu": 4}}},
        {"op": "put_subject", "spec": {"name": team}},
        {"op": "issue_token", "spec": {"role": "subject", "subject": team}},
        {"op": "put_policy", "spec": {"subject": team, "pool": pool, "reserved": {"gpu": 5}}},
    ]
    refused = api.call("POST", "/v1/definitions/apply", json={"changes": changes})
    assert refused.status_code == 422, refused.text
    assert refused.json()["field"] == "changes[3].spec.reserved.gpu"
    assert "no change was applied" in refused.json()["detail"]
    assert api.call("GET", f"/v1/pools/{pool}").status_code == 404
    assert api.call("GET", f"/v1/subjects/{team}").status_code == 404
    assert api.ok("GET", "/v1/tokens") == tokens_before
    assert api.ok("GET", "/v1/events?limit=1000") == events_before

    changes[3]["spec"]["reserved"] = {"gpu": 4}
    applied = api.ok("POST", "/v1/definitions/apply", json={"changes": changes})
    assert [r["op"] for r in applied["results"]] == ["put_pool", "put_subject", "issue_token", "put_policy"]
    assert applied["results"][2]["result"]["token"].startswith("rp_")
    assert api.ok("GET", f"/v1/policies/{pool}/{team}")["reserved"] == {"gpu": 4}
