"""Sign-in, sessions and the checks in front of the dashboard's data and actions, over HTTP against the
app in-process (no browser): what a visitor without a session gets, what the cookie looks like, CSRF
and cross-site refusals, roles, revocation, and what a subject token may see."""

from __future__ import annotations

import re
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from respools.server import Settings, create_app
from respools.server.dashboard.session import COOKIE_NAME
from tests.dashboard.helpers import a100

ADMIN = "rp_dashboard_access_admin"
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            database_url=f"sqlite:///{Path(tmp) / 'respools.db'}",
            admin_token=ADMIN,
            tick_s=0.1,
            election_interval_s=0.2,
            log_json=False,
        )
        with TestClient(create_app(settings)) as test_client:
            yield test_client


def ok(client: TestClient, method: str, path: str, token: str = ADMIN, **kwargs: Any) -> Any:
    response = client.request(method, path, headers={"Authorization": f"Bearer {token}"}, **kwargs)
    assert response.status_code < 300, response.text
    return response.json() if response.content else None


def new_token(client: TestClient, role: str, subject: str | None = None) -> tuple[str, str]:
    body = ok(client, "POST", "/v1/tokens", json={"role": role} | ({"subject": subject} if subject else {}))
    return body["token"], body["id"]


def sign_in(client: TestClient, token: str) -> str:
    """Sign in; the client now carries that session (and only it). Returns the cookie value."""
    client.cookies.clear()
    response = client.post("/ui/login", content=f"token={token}", headers=FORM, follow_redirects=False)
    assert response.status_code == 303, response.text
    return use(client, response.cookies[COOKIE_NAME])


def use(client: TestClient, session: str) -> str:
    client.cookies.clear()
    client.cookies.set(COOKIE_NAME, session)
    return session


def csrf_of(page: str) -> str:
    match = re.search(r'<meta name="csrf-token" content="([^"]+)">', page)
    assert match, "the page carries no CSRF token"
    return match.group(1)


def pool_with_lease(client: TestClient) -> tuple[str, str, dict[str, Any]]:
    suffix = uuid.uuid4().hex[:6]
    pool, subject = f"pool-{suffix}", f"team-{suffix}"
    ok(
        client,
        "PUT",
        f"/v1/pools/{pool}",
        json={"name": pool, "inventory": [{"name": "n1", "gpus": [a100(f"G-{suffix}", 0)]}]},
    )
    ok(client, "PUT", f"/v1/subjects/{subject}", json={"name": subject})
    ok(client, "POST", "/v1/policies", json={"subject": subject, "pool": pool, "reserved": {"gpu": 1}})
    request = ok(
        client,
        "POST",
        "/v1/requests?wait=5",
        json={"subject": subject, "resources": {"gpu": 1}, "labels": {"step": f"secret-step-{suffix}"}},
    )
    assert request["state"] == "granted", request
    return pool, subject, request


def test_without_a_session_every_page_is_the_login_prompt(client: TestClient) -> None:
    pool, _, _ = pool_with_lease(client)
    client.cookies.clear()
    page = client.get("/")
    assert page.status_code == 200
    assert 'name="token"' in page.text and pool not in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY"
    for path in ("/ui/sections", "/ui/stream"):
        assert client.get(path).status_code == 401


def test_login_exchanges_the_token_for_an_http_only_session_cookie(client: TestClient) -> None:
    response = client.post("/ui/login", content=f"token={ADMIN}", headers=FORM, follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == "/"
    header = response.headers["set-cookie"]
    assert "HttpOnly" in header and "samesite=strict" in header.lower() and "Path=/" in header
    value = response.cookies[COOKIE_NAME]
    assert ADMIN not in value and ADMIN not in response.headers["location"]

    use(client, value)
    body = client.get("/ui/sections").json()
    assert set(body["sections"]) == {
        f"sec-{n}" for n in ("pools", "leases", "queue", "history", "usage", "reservations")
    }


@pytest.mark.parametrize(
    ("token", "status", "message"),
    [("", 401, "Paste a token"), ("rp_unknown", 401, "not known")],
)
def test_login_refuses_missing_and_unknown_tokens(client: TestClient, token: str, status: int, message: str) -> None:
    response = client.post("/ui/login", content=f"token={token}", headers=FORM, follow_redirects=False)
    assert response.status_code == status
    assert message in response.text and COOKIE_NAME not in response.headers.get("set-cookie", "")


def test_cross_site_posts_are_refused(client: TestClient) -> None:
    cross = FORM | {"Sec-Fetch-Site": "cross-site"}
    assert client.post("/ui/login", content=f"token={ADMIN}", headers=cross, follow_redirects=False).status_code == 403
    other_origin = FORM | {"Origin": "https://evil.example"}
    assert client.post("/ui/login", content=f"token={ADMIN}", headers=other_origin).status_code == 403


def test_a_tampered_or_foreign_cookie_is_no_session(client: TestClient) -> None:
    good = sign_in(client, ADMIN)
    token_id, expires, nonce, signature = good.split(".")
    for forged in (
        f"{token_id}.{int(expires) + 3600}.{nonce}.{signature}",  # extended lifetime
        f"tok_someoneelse.{expires}.{nonce}.{signature}",  # another token
        good[:-2] + ("AA" if not good.endswith("AA") else "BB"),  # bad signature
        "garbage",
    ):
        use(client, forged)
        assert client.get("/ui/sections").status_code == 401, forged
    use(client, good)
    assert client.get("/ui/sections").status_code == 200


def test_admin_actions_need_the_csrf_token_and_the_admin_role(client: TestClient) -> None:
    pool, _, request = pool_with_lease(client)
    viewer_token, _ = new_token(client, "viewer")
    viewer = sign_in(client, viewer_token)
    viewer_page = client.get("/").text
    assert 'class="action"' not in viewer_page
    denied = client.post(f"/ui/pools/{pool}/drain", headers={"X-CSRF-Token": csrf_of(viewer_page)})
    assert denied.status_code == 403 and "admin" in denied.json()["detail"]

    admin = sign_in(client, ADMIN)
    csrf = csrf_of(client.get("/").text)
    assert csrf != csrf_of(viewer_page)
    assert client.post(f"/ui/pools/{pool}/drain").status_code == 403
    assert client.post(f"/ui/pools/{pool}/drain", headers={"X-CSRF-Token": csrf_of(viewer_page)}).status_code == 403
    cross = {"X-CSRF-Token": csrf, "Sec-Fetch-Site": "cross-site"}
    assert client.post(f"/ui/pools/{pool}/drain", headers=cross).status_code == 403
    assert ok(client, "GET", f"/v1/pools/{pool}")["draining"] is False

    done = client.post(f"/ui/pools/{pool}/drain", headers={"X-CSRF-Token": csrf})
    assert done.status_code == 200, done.text
    assert ok(client, "GET", f"/v1/pools/{pool}")["draining"] is True
    preempted = client.post(f"/ui/leases/{request['lease_id']}/preempt", headers={"X-CSRF-Token": csrf})
    assert preempted.json()["state"] == "preempting"
    assert ok(client, "GET", f"/v1/leases/{request['lease_id']}")["preempt_reason"] == "admin"
    assert client.post("/ui/leases/lse_missing/preempt", headers={"X-CSRF-Token": csrf}).status_code == 404
    use(client, viewer)  # the viewer's session is still its own
    assert 'class="action"' not in client.get("/").text
    assert admin != viewer


def test_revoking_a_token_ends_its_sessions(client: TestClient) -> None:
    token, token_id = new_token(client, "viewer")
    sign_in(client, token)
    assert client.get("/ui/sections").status_code == 200
    ok(client, "DELETE", f"/v1/tokens/{token_id}")
    assert client.get("/ui/sections").status_code == 401
    assert 'name="token"' in client.get("/").text


def test_a_subject_sees_its_own_work_and_others_only_as_taken_capacity(client: TestClient) -> None:
    _, subject, request = pool_with_lease(client)
    other_pool, other_subject, other = pool_with_lease(client)
    other_step = f"secret-step-{other_pool.removeprefix('pool-')}"
    token, _ = new_token(client, "subject", subject)
    sign_in(client, token)
    sections = client.get("/ui/sections").json()["sections"]
    assert request["lease_id"] in sections["sec-leases"]
    assert other["lease_id"] not in sections["sec-leases"] and other_subject not in sections["sec-leases"]
    assert other_pool in sections["sec-pools"]  # pools are visible to every token, as in the API
    assert other_subject not in sections["sec-pools"] and other_step not in sections["sec-pools"]
    assert other["lease_id"] not in sections["sec-pools"]
    assert "another subject" in sections["sec-pools"]  # the other team's GPU shows as taken
    for name in ("sec-history", "sec-usage", "sec-queue", "sec-reservations"):
        assert other_subject not in sections[name], name


def test_static_files_are_served_with_their_types(client: TestClient) -> None:
    assert client.get("/ui/static/dashboard.js").headers["content-type"].startswith("text/javascript")
    assert client.get("/ui/static/dashboard.css").headers["content-type"].startswith("text/css")
    assert client.get("/ui/static/../app.py").status_code == 404
    assert client.get("/ui/static/nothing.js").status_code == 404


def test_an_overdue_lease_shows_how_long_it_has_overrun(client: TestClient) -> None:
    _, _, request = pool_with_lease(client)
    ok(client, "POST", f"/v1/leases/{request['lease_id']}/preempt", json={"grace_s": 0.1})
    deadline = time.monotonic() + 10
    while not ok(client, "GET", f"/v1/leases/{request['lease_id']}")["overdue_since"]:
        assert time.monotonic() < deadline, "the lease never became overdue"
        time.sleep(0.05)
    sign_in(client, ADMIN)
    leases = client.get("/ui/sections").json()["sections"]["sec-leases"]
    row = leases[leases.index(f'data-lease="{request["lease_id"]}"') :].split("</tr>")[0]
    assert 'class="badge overdue"' in row and re.search(r"overdue \d", row), row


def test_a_lease_links_to_the_run_it_serves_and_can_be_linked_to(client: TestClient) -> None:
    suffix = uuid.uuid4().hex[:6]
    pool, subject = f"pool-{suffix}", f"team-{suffix}"
    ok(client, "PUT", f"/v1/pools/{pool}", json={"name": pool, "capacity": {"gpu": 2}})
    ok(client, "PUT", f"/v1/subjects/{subject}", json={"name": subject})
    ok(client, "POST", "/v1/policies", json={"subject": subject, "pool": pool, "reserved": {"gpu": 2}})
    url = "https://zenml.example.com/projects/default/runs/4f1c"
    leases = {}
    for label in (url, "javascript:alert(1)"):
        labels = {"step": "train", "run_url": label}
        body = {"subject": subject, "pools": [pool], "resources": {"gpu": 1}, "labels": labels}
        request = ok(client, "POST", "/v1/requests?wait=5", json=body)
        assert request["state"] == "granted", request
        leases[label] = request["lease_id"]
    sign_in(client, ADMIN)
    section = client.get("/ui/sections").json()["sections"]["sec-leases"]
    linked = section[section.index(f'id="lease-{leases[url]}"') :].split("</tr>")[0]
    assert f'<a class="run-link" href="{url}"' in linked and "run_url=" not in linked
    unsafe = section[section.index(f'id="lease-{leases["javascript:alert(1)"]}"') :].split("</tr>")[0]
    assert "run-link" not in unsafe and "javascript:" not in unsafe  # a label is text, never a script link
