"""Every refusal path: each bad input gets a 4xx with an ErrorBody naming the field at fault — never a
500. The table walks the API endpoint by endpoint; a property test throws arbitrary JSON at the write
endpoints."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.server.conftest import Api, World


@dataclass(frozen=True)
class Case:
    name: str
    method: str
    path: str
    status: int
    field: str | None = None
    body: Any = None
    token: str | None = "admin"
    raw: bytes | None = None
    headers: dict[str, str] | None = None


def _later(hours: float) -> str:
    return (datetime.now(UTC) + timedelta(hours=hours)).isoformat()


def cases(w: World, other: World, lease: str, ended: str, request: str, viewer: str) -> list[Case]:
    p, s = w.pool, w.subject
    gpu = {"uuid": "GPU-x", "index": 0, "model": "NVIDIA A100-SXM4-80GB", "memory_mb": 81920}
    return [
        # authentication and roles
        Case("no token", "GET", "/v1/pools", 401, "Authorization", token=None),
        Case("unknown token", "GET", "/v1/pools", 401, "Authorization", token="rp_nope"),
        Case("viewer submits", "POST", "/v1/requests", 403, body={"resources": {"gpu": 1}}, token=viewer),
        Case("subject defines a pool", "POST", "/v1/pools", 403, body={"name": "x"}, token=w.token),
        Case(
            "subject submits for another",
            "POST",
            "/v1/requests",
            403,
            body={"subject": other.subject, "resources": {"gpu": 1}},
            token=w.token,
        ),
        Case("other subject's request", "GET", f"/v1/requests/{request}", 403, token=other.token),
        Case("other subject's wait", "GET", f"/v1/requests/{request}/wait?timeout=0", 403, token=other.token),
        Case("other subject's cancel", "POST", f"/v1/requests/{request}/cancel", 403, token=other.token),
        Case("other subject's lease", "GET", f"/v1/leases/{lease}", 403, token=other.token),
        Case("other subject's heartbeat", "POST", f"/v1/leases/{lease}/heartbeat", 403, token=other.token),
        Case("other subject's release", "POST", f"/v1/leases/{lease}/release", 403, token=other.token),
        Case("subject preempts", "POST", f"/v1/leases/{lease}/preempt", 403, token=w.token),
        Case("subject lists another's requests", "GET", f"/v1/requests?subject={other.subject}", 403, token=w.token),
        Case("subject lists another's leases", "GET", f"/v1/leases?subject={other.subject}", 403, token=w.token),
        Case("subject reads another's events", "GET", f"/v1/events?subject={other.subject}", 403, token=w.token),
        Case(
            "subject streams another's events", "GET", f"/v1/events/stream?subject={other.subject}", 403, token=w.token
        ),
        Case("subject reads another's policy", "GET", f"/v1/policies/{p}/{other.subject}", 403, token=w.token),
        Case("subject lists another's policies", "GET", f"/v1/policies?subject={other.subject}", 403, token=w.token),
        Case(
            "subject lists another's reservations",
            "GET",
            f"/v1/reservations?subject={other.subject}",
            403,
            token=w.token,
        ),
        Case("subject reads another subject", "GET", f"/v1/subjects/{other.subject}", 403, token=w.token),
        Case("subject lists tokens", "GET", "/v1/tokens", 403, token=w.token),
        # pools
        Case("pool name pattern", "POST", "/v1/pools", 422, "name", body={"name": "Bad Name"}),
        Case("pool exists", "POST", "/v1/pools", 409, "name", body={"name": p, "capacity": {"gpu": 8}}),
        Case("pool path mismatch", "PUT", f"/v1/pools/{p}", 422, "name", body={"name": "elsewhere"}),
        Case("pool bad key", "PUT", "/v1/pools/k", 422, "capacity", body={"name": "k", "capacity": {"GPU!": 1}}),
        Case(
            "pool negative amount", "PUT", "/v1/pools/k", 422, "capacity", body={"name": "k", "capacity": {"gpu": -1}}
        ),
        Case("pool unknown stack", "PUT", "/v1/pools/k", 422, "stack", body={"name": "k", "stack": "nope"}),
        Case("pool unknown field", "PUT", "/v1/pools/k", 422, "colour", body={"name": "k", "colour": "red"}),
        Case(
            "pool gpu with inventory",
            "PUT",
            "/v1/pools/k",
            422,
            "capacity.gpu",
            body={"name": "k", "capacity": {"gpu": 1}, "inventory": [{"name": "h", "gpus": [gpu]}]},
        ),
        Case(
            "pool grace negative",
            "PUT",
            "/v1/pools/k",
            422,
            "preemption_grace_s",
            body={"name": "k", "preemption_grace_s": -1},
        ),
        Case(
            "pool not JSON", "PUT", "/v1/pools/k", 422, raw=b"{not json", headers={"Content-Type": "application/json"}
        ),
        Case(
            "pool NaN amount",
            "PUT",
            "/v1/pools/k",
            422,
            "capacity",
            raw=b'{"name": "k", "capacity": {"gpu": NaN}}',
            headers={"Content-Type": "application/json"},
        ),
        Case("pool body is a list", "PUT", "/v1/pools/k", 422, body=[1, 2]),
        Case(
            "pool shrinks under its policies",
            "PUT",
            f"/v1/pools/{p}",
            422,
            "capacity",
            body={"name": p, "capacity": {"gpu": 2}},
        ),
        Case("pool unknown", "GET", "/v1/pools/nowhere", 404, "pool"),
        Case("delete busy pool", "DELETE", f"/v1/pools/{p}", 409),
        Case("delete unknown pool", "DELETE", "/v1/pools/nowhere", 404, "pool"),
        Case("drain unknown pool", "POST", "/v1/pools/nowhere/drain", 404, "pool"),
        Case("status unknown pool", "GET", "/v1/pools/nowhere/status", 404, "pool"),
        Case("hosts of unknown pool", "GET", "/v1/pools/nowhere/hosts", 404, "pool"),
        Case("host for unknown pool", "PUT", "/v1/pools/nowhere/hosts/h", 404, "pool", body={"name": "h"}),
        Case("host path mismatch", "PUT", f"/v1/pools/{p}/hosts/h", 422, "name", body={"name": "other"}),
        Case(
            "host on a pool declaring gpu",
            "PUT",
            f"/v1/pools/{p}/hosts/h",
            409,
            "capacity.gpu",
            body={"name": "h", "gpus": [gpu]},
        ),
        Case("host ttl zero", "PUT", f"/v1/pools/{p}/hosts/h?ttl_s=0", 422, "ttl_s", body={"name": "h"}),
        Case(
            "host gpu missing memory",
            "PUT",
            f"/v1/pools/{p}/hosts/h",
            422,
            "gpus[0].memory_mb",
            body={"name": "h", "gpus": [{"uuid": "u", "index": 0, "model": "m"}]},
        ),
        Case("forget unknown host", "DELETE", f"/v1/pools/{p}/hosts/ghost", 404, "host"),
        # subjects
        Case("subject path mismatch", "PUT", "/v1/subjects/a", 422, "name", body={"name": "b"}),
        Case("subject name pattern", "PUT", "/v1/subjects/A_", 422, "name", body={"name": "A_"}),
        Case("subject unknown", "GET", "/v1/subjects/nobody", 404, "subject"),
        Case("delete busy subject", "DELETE", f"/v1/subjects/{s}", 409),
        # policies
        Case("policy unknown pool", "POST", "/v1/policies", 422, "pool", body={"subject": s, "pool": "nowhere"}),
        Case("policy unknown subject", "POST", "/v1/policies", 422, "subject", body={"subject": "nobody", "pool": p}),
        Case(
            "policy reserved above limit",
            "POST",
            "/v1/policies",
            422,
            "reserved.gpu",
            body={"subject": s, "pool": p, "reserved": {"gpu": 4}, "limit": {"gpu": 2}},
        ),
        Case(
            "policy reserves too much",
            "POST",
            "/v1/policies",
            422,
            "reserved.gpu",
            body={"subject": other.subject, "pool": p, "reserved": {"gpu": 6}},
        ),
        Case(
            "policy unmetered key",
            "POST",
            "/v1/policies",
            422,
            "reserved.tokens",
            body={"subject": s, "pool": p, "reserved": {"tokens": 5}},
        ),
        Case(
            "policy negative weight",
            "POST",
            "/v1/policies",
            422,
            "weight",
            body={"subject": s, "pool": p, "weight": -1},
        ),
        Case(
            "policy path mismatch",
            "PUT",
            f"/v1/policies/{p}/{other.subject}",
            422,
            "subject",
            body={"subject": s, "pool": p},
        ),
        Case("policy unknown", "GET", f"/v1/policies/{p}/nobody", 404),
        Case("delete unknown policy", "DELETE", f"/v1/policies/{p}/nobody", 404),
        # tokens
        Case("subject token without subject", "POST", "/v1/tokens", 422, "subject", body={"role": "subject"}),
        Case(
            "token for unknown subject",
            "POST",
            "/v1/tokens",
            422,
            "subject",
            body={"role": "subject", "subject": "nobody"},
        ),
        Case("token bad role", "POST", "/v1/tokens", 422, "role", body={"role": "root"}),
        Case("revoke unknown token", "DELETE", "/v1/tokens/tok_nope", 404, "id"),
        # requests
        Case("request asks nothing", "POST", "/v1/requests", 422, "resources", body={"resources": {}}, token=w.token),
        Case("request without resources", "POST", "/v1/requests", 422, "resources", body={}, token=w.token),
        Case(
            "request bad key", "POST", "/v1/requests", 422, "resources", body={"resources": {"Gpu": 1}}, token=w.token
        ),
        Case(
            "request fractional cpu",
            "POST",
            "/v1/requests",
            422,
            "resources",
            body={"resources": {"mcpu": 0.5}},
            token=w.token,
        ),
        Case(
            "request gpu resolution",
            "POST",
            "/v1/requests",
            422,
            "resources",
            body={"resources": {"gpu": 0.0001}},
            token=w.token,
        ),
        Case(
            "request replicas zero",
            "POST",
            "/v1/requests",
            422,
            "replicas",
            body={"resources": {"gpu": 1}, "replicas": 0},
            token=w.token,
        ),
        Case("admin request names no subject", "POST", "/v1/requests", 422, "subject", body={"resources": {"gpu": 1}}),
        Case(
            "admin request unknown subject",
            "POST",
            "/v1/requests",
            422,
            "subject",
            body={"subject": "nobody", "resources": {"gpu": 1}},
        ),
        Case(
            "request unknown pool",
            "POST",
            "/v1/requests",
            422,
            "pools[0]",
            body={"resources": {"gpu": 1}, "pools": ["nowhere"]},
            token=w.token,
        ),
        Case(
            "request empty pools",
            "POST",
            "/v1/requests",
            422,
            "pools",
            body={"resources": {"gpu": 1}, "pools": []},
            token=w.token,
        ),
        Case(
            "request keys differ",
            "POST",
            "/v1/requests",
            422,
            "idempotency_key",
            body={"resources": {"gpu": 1}, "idempotency_key": "a"},
            token=w.token,
            headers={"Idempotency-Key": "b"},
        ),
        Case(
            "request wait too long",
            "POST",
            "/v1/requests?wait=3600",
            422,
            "wait",
            body={"resources": {"gpu": 1}},
            token=w.token,
        ),
        Case(
            "request wait negative",
            "POST",
            "/v1/requests?wait=-1",
            422,
            "wait",
            body={"resources": {"gpu": 1}},
            token=w.token,
        ),
        Case("request unknown", "GET", "/v1/requests/req_nope", 404, "request_id", token=w.token),
        Case("wait unknown", "GET", "/v1/requests/req_nope/wait?timeout=0", 404, "request_id", token=w.token),
        Case("wait too long", "GET", f"/v1/requests/{request}/wait?timeout=3600", 422, "timeout", token=w.token),
        Case("wait bad state", "GET", f"/v1/requests/{request}/wait?state=sleeping", 422, "state", token=w.token),
        Case("cancel unknown", "POST", "/v1/requests/req_nope/cancel", 404, "request_id", token=w.token),
        Case("list bad label", "GET", "/v1/requests?label=nokey", 422, "label", token=w.token),
        Case("list bad limit", "GET", "/v1/requests?limit=0", 422, "limit", token=w.token),
        Case("list bad state", "GET", "/v1/requests?state=nap", 422, "state[0]", token=w.token),
        # leases
        Case("lease unknown", "GET", "/v1/leases/lse_nope", 404, "lease_id", token=w.token),
        Case("heartbeat unknown", "POST", "/v1/leases/lse_nope/heartbeat", 404, "lease_id", token=w.token),
        Case("release unknown", "POST", "/v1/leases/lse_nope/release", 404, "lease_id", token=w.token),
        Case("preempt unknown", "POST", "/v1/leases/lse_nope/preempt", 404, "lease_id"),
        Case("heartbeat ended lease", "POST", f"/v1/leases/{ended}/heartbeat", 409, "lease_id", token=w.token),
        Case("preempt ended lease", "POST", f"/v1/leases/{ended}/preempt", 409, "lease_id"),
        Case("overuse by a subject", "POST", f"/v1/leases/{lease}/overuse", 403, body={}, token=w.token),
        Case(
            "overuse of another lease",
            "POST",
            f"/v1/leases/{lease}/overuse",
            422,
            "lease_id",
            body={
                "lease_id": "lse_other",
                "pool": p,
                "host": "h",
                "gpu_uuid": "g",
                "used_memory_mb": 2,
                "cap_memory_mb": 1,
                "message": "m",
            },
        ),
        Case("overuse missing fields", "POST", f"/v1/leases/{lease}/overuse", 422, "lease_id", body={}),
        Case("preempt negative grace", "POST", f"/v1/leases/{lease}/preempt", 422, "grace_s", body={"grace_s": -1}),
        # reservations
        Case(
            "reservation window reversed",
            "POST",
            "/v1/reservations",
            422,
            "end",
            body={"subject": s, "pool": p, "resources": {"gpu": 1}, "start": _later(2), "end": _later(1)},
        ),
        Case(
            "reservation in the past",
            "POST",
            "/v1/reservations",
            422,
            "end",
            body={"subject": s, "pool": p, "resources": {"gpu": 1}, "start": _later(-3), "end": _later(-2)},
        ),
        Case(
            "reservation unknown pool",
            "POST",
            "/v1/reservations",
            422,
            "pool",
            body={"subject": s, "pool": "nowhere", "resources": {"gpu": 1}, "start": _later(1), "end": _later(2)},
        ),
        Case(
            "reservation too big",
            "POST",
            "/v1/reservations",
            422,
            "resources.gpu",
            body={"subject": s, "pool": p, "resources": {"gpu": 7}, "start": _later(1), "end": _later(2)},
        ),
        Case(
            "reservation nothing",
            "POST",
            "/v1/reservations",
            422,
            "resources",
            body={"subject": s, "pool": p, "resources": {}, "start": _later(1), "end": _later(2)},
        ),
        Case("reservation unknown", "GET", "/v1/reservations/rsv_nope", 404, "id"),
        Case("delete unknown reservation", "DELETE", "/v1/reservations/rsv_nope", 404, "id"),
        # events and the rest
        Case("events negative cursor", "GET", "/v1/events?after=-1", 422, "after"),
        Case("events bad kind", "GET", "/v1/events?kind=party", 422, "kind[0]"),
        Case(
            "stream bad Last-Event-ID",
            "GET",
            "/v1/events/stream",
            422,
            "Last-Event-ID",
            headers={"Last-Event-ID": "yesterday"},
        ),
        Case("no such endpoint", "GET", "/v1/nothing", 404),
        Case("wrong method", "DELETE", "/v1/requests", 405),
    ]


@pytest.fixture(scope="module")
def setup(api: Api) -> dict[str, Any]:
    world = api.world()
    other = api.world()
    api.ok("POST", "/v1/policies", json={"subject": other.subject, "pool": world.pool, "reserved": {"gpu": 1}})
    held = api.submit(world.token, resources={"gpu": 1})
    done = api.submit(world.token, resources={"gpu": 1})
    api.ok("POST", f"/v1/leases/{done['lease_id']}/release", world.token)
    viewer = api.ok("POST", "/v1/tokens", json={"role": "viewer"})["token"]
    return {
        "world": world,
        "other": other,
        "lease": held["lease_id"],
        "ended": done["lease_id"],
        "request": held["id"],
        "viewer": viewer,
    }


def test_every_refusal_is_a_4xx_naming_the_field(api: Api, setup: dict[str, Any]) -> None:
    table = cases(setup["world"], setup["other"], setup["lease"], setup["ended"], setup["request"], setup["viewer"])
    failures = []
    for case in table:
        token = "rp_test_admin_token" if case.token == "admin" else case.token
        kwargs: dict[str, Any] = {"headers": case.headers or {}}
        if case.raw is not None:
            kwargs["content"] = case.raw
        elif case.body is not None:
            kwargs["json"] = case.body
        response = api.call(case.method, case.path, token, **kwargs)
        body = response.json()
        problem = None
        if response.status_code != case.status:
            problem = f"status {response.status_code}"
        elif set(body) != {"detail", "field"} or not body["detail"]:
            problem = f"body {body}"
        elif case.field is not None and body["field"] != case.field:
            problem = f"field {body['field']!r}"
        if problem:
            failures.append(f"{case.name}: {problem}, expected {case.status}/{case.field}: {body}")
    assert not failures, "\n".join(failures)


def test_refusals_do_not_change_anything(api: Api, setup: dict[str, Any]) -> None:
    world = setup["world"]
    assert api.ok("GET", f"/v1/leases/{setup['lease']}", world.token)["state"] == "granted"
    assert api.ok("GET", f"/v1/pools/{world.pool}")["capacity"] == {"gpu": 8}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=8,
)
field_names = st.sampled_from(
    [
        "name",
        "capacity",
        "resources",
        "subject",
        "pool",
        "reserved",
        "limit",
        "inventory",
        "gpus",
        "priority",
        "weight",
        "pools",
        "replicas",
        "start",
        "end",
        "role",
        "forms",
        "settings",
        "labels",
        "selectors",
    ]
)
bodies = st.dictionaries(field_names, json_values, max_size=5) | json_values


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    endpoint=st.sampled_from(["/v1/pools", "/v1/policies", "/v1/requests", "/v1/reservations", "/v1/tokens"]),
    body=bodies,
)
def test_arbitrary_json_never_makes_a_500(api: Api, setup: dict[str, Any], endpoint: str, body: Any) -> None:
    response = api.call("POST", endpoint, json=body)
    assert response.status_code < 500, (endpoint, body, response.text)
    if response.status_code >= 400:
        assert set(response.json()) == {"detail", "field"}
