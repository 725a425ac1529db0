"""Hostile input, field by field, on both stores: every row is refused with a 4xx that names the field,
the answer never echoes a huge input back, nothing reaches the store, and the state stays as it was.
Then the connection: an answer to bad input, even an unexpected error, leaves a keep-alive connection
open (a real uvicorn server)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn
from starlette.types import Receive, Scope, Send

from respools.server.input_guard import InputGuard
from tests.server.conftest import ADMIN_TOKEN, Api

HUGE_KEY = "k" * 10_000


def _request(**spec: Any) -> dict[str, Any]:
    return {"resources": {"gpu": 1}} | spec


# (description, method, path template, body, expected status, field named)
ROWS: list[tuple[str, str, str, Any, int, str]] = [
    ("NUL in a label", "POST", "/v1/requests", _request(labels={"step": "a\x00b"}), 422, "labels.step"),
    ("NUL in a label key", "POST", "/v1/requests", _request(labels={"a\x00": "b"}), 422, "labels.a\\u0000"),
    ("NUL in an idempotency key", "POST", "/v1/requests", _request(idempotency_key="k\x00"), 422, "idempotency_key"),
    ("NUL in a token description", "POST", "/v1/tokens", {"role": "viewer", "description": "\x00"}, 422, "description"),
    ("NUL in a path id", "GET", "/v1/leases/lse_%00", None, 422, "path"),
    ("NUL in a query filter", "GET", "/v1/events?subject=a%00b", None, 422, "subject"),
    ("a cursor past 64 bits", "GET", "/v1/events?after=99999999999999999999999", None, 422, "after"),
    ("a GPU amount of 1e30", "POST", "/v1/requests", {"resources": {"gpu": 1e30}}, 422, "resources"),
    ("max_runtime_s of 1e308", "POST", "/v1/requests", _request(max_runtime_s=1e308), 422, "max_runtime_s"),
    ("a 10,000-character resource key", "POST", "/v1/requests", {"resources": {HUGE_KEY: 1}}, 422, "resources"),
    ("a priority past 64 bits", "POST", "/v1/requests", _request(priority=10**20), 422, "priority"),
    ("65 labels", "POST", "/v1/requests", _request(labels={f"k{i}": "v" for i in range(65)}), 422, "labels"),
    ("a 3,000-character label value", "POST", "/v1/requests", _request(labels={"k": "v" * 3000}), 422, "labels.k"),
    ("65 resource keys", "POST", "/v1/requests", {"resources": {f"k{i}": 1 for i in range(65)}}, 422, "resources"),
    ("a long-poll of a year", "GET", "/v1/requests/req_x/wait?timeout=31536000", None, 422, "timeout"),
    ("a pool weight of 1e300", "POST", "/v1/policies", {"subject": "a", "pool": "b", "weight": 1e300}, 422, "weight"),
    ("a grace of a year", "PUT", "/v1/pools/p1", {"name": "p1", "preemption_grace_s": 3e7}, 422, "preemption_grace"),
    ("a stack name of 200 characters", "PUT", "/v1/pools/p2", {"name": "p2", "stack": "s" * 200}, 422, "stack"),
    ("an Idempotency-Key header of 500 characters", "POST", "/v1/requests", _request(), 422, "Idempotency-Key"),
]  # fmt: skip


@pytest.mark.parametrize(("what", "method", "path", "body", "status", "field"), ROWS, ids=[r[0] for r in ROWS])
def test_hostile_input_is_refused_naming_the_field(
    api: Api, what: str, method: str, path: str, body: Any, status: int, field: str
) -> None:
    world = api.world()
    before = api.ok("GET", "/v1/requests?limit=1000")
    headers = {"Idempotency-Key": "i" * 500} if "Idempotency-Key" in what else {}
    response = api.call(
        method, path, world.token if path == "/v1/requests" else ADMIN_TOKEN, json=body, headers=headers
    )
    assert response.status_code == status, (what, response.status_code, response.text[:300])
    answer = response.json()
    assert answer["field"] is not None and answer["field"].lower().startswith(field.lower()), (what, answer)
    assert len(response.text) < 1000, "the answer does not echo a huge input back"
    assert api.ok("GET", "/v1/requests?limit=1000") == before, "nothing was stored"


def test_a_body_past_the_limit_is_refused_before_it_is_read(api: Api) -> None:
    response = api.call("POST", "/v1/requests", content=b"{" + b" " * (9 * 1024 * 1024) + b"}")
    assert response.status_code == 413 and response.json()["field"] == "body"


async def _explodes(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        return
    if scope["path"] == "/boom":
        raise RuntimeError("a bug no handler knew")
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture
def exploding_server() -> Iterator[int]:
    """The guard in front of an app with a bug, served by a real uvicorn on a free loopback port."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = uvicorn.Config(
        InputGuard(_explodes, max_body_bytes=1024), host="127.0.0.1", port=port, lifespan="off", log_level="critical"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    yield port
    server.should_exit = True
    thread.join(5)


def test_an_unexpected_error_is_a_500_and_the_connection_stays_open(exploding_server: int) -> None:
    with socket.create_connection(("127.0.0.1", exploding_server), timeout=5) as conn:
        answers = []
        for path in ("/boom", "/boom", "/fine"):
            conn.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            answers.append(_read_response(conn))
    statuses = [a.split(b" ", 2)[1] for a in answers]
    assert statuses == [b"500", b"500", b"200"], answers
    assert b"incident" in answers[0], "the 500 is the service's JSON error, with an incident id"


def _read_response(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(4096)
        assert chunk, f"the server closed the connection after {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    while len(body) < length:
        body += conn.recv(4096)
    return head + b"\r\n\r\n" + body
