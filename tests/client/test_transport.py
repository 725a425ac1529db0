"""Retries and errors without a server: ``httpx.MockTransport`` plays the server, counting calls.

What must hold: 5xx and connection failures are retried where replaying is safe; 4xx never; a POST
without an idempotency key is not replayed after a broken connection (it may have been applied); every
refusal becomes an ``ApiError`` with the server's ``detail`` and ``field``."""

from __future__ import annotations

import logging
from collections.abc import Callable

import httpx
import pytest

from respools.client import ApiError, Client, RetryPolicy, ServerUnreachable
from respools.model import RequestSpec

FAST = RetryPolicy(attempts=4, budget_s=5, backoff_s=0.001, backoff_max_s=0.005)
REQUEST = {
    "id": "req_1",
    "subject": "team",
    "resources": {"gpu": 1},
    "state": "pending",
    "submitted_at": "2030-01-01T00:00:00Z",
}

Handler = Callable[[httpx.Request], httpx.Response]


def client_with(handler: Handler, token: str | None = "tok") -> tuple[Client, list[httpx.Request]]:
    calls: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return handler(request)

    return Client("http://respools.test", token, retry=FAST, transport=httpx.MockTransport(record)), calls


def test_5xx_on_a_get_is_retried_until_it_succeeds() -> None:
    answers = iter([httpx.Response(503, json={"detail": "db down"}), httpx.Response(500), httpx.Response(200, json=[])])
    client, calls = client_with(lambda _: next(answers))
    assert client.get("/v1/pools") == []
    assert len(calls) == 3


def test_5xx_that_persists_becomes_an_api_error_after_the_attempts() -> None:
    client, calls = client_with(lambda _: httpx.Response(502, text="<html>bad gateway</html>"))
    with pytest.raises(ApiError) as raised:
        client.get("/v1/pools")
    assert raised.value.status == 502 and "bad gateway" in raised.value.detail
    assert len(calls) == FAST.attempts


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 422])
def test_4xx_is_never_retried_and_carries_detail_and_field(status: int) -> None:
    body = {"detail": "pool 'x' does not exist", "field": "pools[0]"}
    client, calls = client_with(lambda _: httpx.Response(status, json=body))
    with pytest.raises(ApiError) as raised:
        client.put("/v1/pools/x", {"name": "x"})
    assert (raised.value.status, raised.value.detail, raised.value.field) == (status, body["detail"], "pools[0]")
    assert len(calls) == 1


def test_a_post_without_a_key_is_not_replayed_after_a_broken_connection() -> None:
    def broken(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadError("connection reset", request=request)

    client, calls = client_with(broken)
    with pytest.raises(ServerUnreachable):
        client.post("/v1/tokens", {"role": "viewer"})
    assert len(calls) == 1


def test_a_post_is_retried_when_it_never_left_or_carries_a_key() -> None:
    outcomes: list[str] = ["connect", "ok", "read", "ok"]

    def flaky(request: httpx.Request) -> httpx.Response:
        outcome = outcomes.pop(0)
        if outcome == "connect":
            raise httpx.ConnectError("refused", request=request)
        if outcome == "read":
            raise httpx.ReadError("reset", request=request)
        return httpx.Response(201, json={"ok": True})

    client, calls = client_with(flaky)
    assert client.post("/v1/tokens", {"role": "viewer"}) == {"ok": True}
    assert client.post("/v1/things", {}, idempotency_key="k1") == {"ok": True}
    assert len(calls) == 4
    assert calls[2].headers["Idempotency-Key"] == calls[3].headers["Idempotency-Key"] == "k1"


def test_submit_retries_with_the_same_idempotency_key() -> None:
    attempts: list[bytes] = []

    def lose_first(request: httpx.Request) -> httpx.Response:
        attempts.append(request.content)
        if len(attempts) == 1:
            raise httpx.ReadError("answer lost", request=request)
        return httpx.Response(200, json=REQUEST)

    client, _ = client_with(lose_first)
    request = client.submit(RequestSpec(resources={"gpu": 1}))
    assert request.id == "req_1"
    assert len(attempts) == 2 and attempts[0] == attempts[1] and b'"idempotency_key":"rpk_' in attempts[0]


def test_unreachable_server_is_one_clear_error() -> None:
    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    client, calls = client_with(refused)
    with pytest.raises(ServerUnreachable, match=r"respools\.test is unreachable"):
        client.get("/v1/pools")
    assert len(calls) == FAST.attempts


def test_401_without_a_configured_token_says_how_to_configure_one() -> None:
    client, _ = client_with(lambda _: httpx.Response(401, json={"detail": "send a bearer token"}), token=None)
    with pytest.raises(ApiError, match="RESPOOLS_TOKEN"):
        client.get("/v1/whoami")


def test_long_poll_adapts_to_a_server_with_a_shorter_limit() -> None:
    seen: list[float] = []

    def limited(request: httpx.Request) -> httpx.Response:
        timeout = float(request.url.params["timeout"])
        seen.append(timeout)
        if timeout > 10:
            return httpx.Response(422, json={"detail": "wait at most 10 seconds", "field": "timeout"})
        return httpx.Response(200, json=REQUEST)

    client, _ = client_with(limited)
    assert client.wait_request("req_1", timeout=25).id == "req_1"
    assert seen == [25.0, 12.5, 6.25]
    client.wait_request("req_1", timeout=25)
    assert seen[-1] == 6.25  # remembered


def test_empty_answers_decode_to_none_and_params_drop_none() -> None:
    client, calls = client_with(lambda _: httpx.Response(204))
    assert client.delete("/v1/pools/x", params={"force": None, "cascade": True}) is None
    assert str(calls[0].url) == "http://respools.test/v1/pools/x?cascade=true"
    assert calls[0].headers["Authorization"] == "Bearer tok"


def test_the_sdks_own_requests_stay_out_of_httpxs_info_log(caplog: pytest.LogCaptureFixture) -> None:
    """A host logging INFO (ZenML does) saw one "HTTP Request" line per heartbeat and long-poll; the SDK's
    calls leave httpx's log (they are on respools.client at DEBUG), the host's own httpx calls stay."""
    client, calls = client_with(lambda _: httpx.Response(200, json=[]))
    with caplog.at_level(logging.DEBUG):
        client.get("/v1/pools")
        client.get("/v1/pools")
        with httpx.Client(transport=httpx.MockTransport(lambda _: httpx.Response(204))) as other:
            other.get("http://elsewhere.test/ping")
    httpx_lines = [r.getMessage() for r in caplog.records if r.name == "httpx"]
    assert len(calls) == 2
    assert httpx_lines == ['HTTP Request: GET http://elsewhere.test/ping "HTTP/1.1 204 No Content"'], httpx_lines
    assert [r.getMessage() for r in caplog.records if r.name == "respools.client"] == ["GET /v1/pools -> 200"] * 2
