"""Failover between replica URLs and a retry budget that counts only time spent failing, with
``httpx.MockTransport`` playing the replicas (the kill-replicas test against real servers is
``tests/server/test_failover.py``)."""

from __future__ import annotations

import time

import httpx
import pytest

from respools.client import Client, RetryPolicy, ServerUnreachable
from respools.client.config import load_config
from respools.client.errors import ConfigError

REPLICAS = "http://a.test:8000, http://b.test:8000/,http://c.test:8000"


def test_respools_url_may_list_several_replicas() -> None:
    config = load_config(environ={"RESPOOLS_URL": REPLICAS})
    assert config.urls == ("http://a.test:8000", "http://b.test:8000", "http://c.test:8000")
    with pytest.raises(ConfigError, match="each url must start with http"):
        load_config(environ={"RESPOOLS_URL": "http://a.test,b.test"})


def test_a_failed_replica_is_left_for_the_next_at_once() -> None:
    seen: list[str] = []

    def replicas(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.host)
        if request.url.host == "a.test":
            raise httpx.ConnectError("connection refused", request=request)
        if request.url.host == "b.test":
            return httpx.Response(503, json={"detail": "database unavailable"})
        return httpx.Response(200, json=[])

    policy = RetryPolicy(attempts=2, budget_s=5, backoff_s=1.0)
    client = Client(REPLICAS, "tok", retry=policy, transport=httpx.MockTransport(replicas))
    started = time.monotonic()
    assert client.get("/v1/pools") == [] and client.get("/v1/pools") == []
    assert seen == ["a.test", "b.test", "c.test", "c.test"], "the working replica is kept"
    assert time.monotonic() - started < 0.5, "no back-off while another replica was untried"
    assert client._transport.failovers == 2


def test_time_on_a_healthy_long_poll_is_not_spent_from_the_budget() -> None:
    """Each poll lives 0.3 s on a healthy replica, then the replica dies under it; five such kills in a
    row take 1.5 s, three times the budget, yet the call is answered: none of that time was failing."""
    kills = iter(range(5))

    def replica(request: httpx.Request) -> httpx.Response:
        if next(kills, None) is not None:
            time.sleep(0.3)
            raise httpx.RemoteProtocolError("server disconnected without sending a response", request=request)
        return httpx.Response(200, json=[])

    policy = RetryPolicy(attempts=10, budget_s=0.5, backoff_s=0.001, backoff_max_s=0.002)
    client = Client("http://a.test:8000", "tok", retry=policy, transport=httpx.MockTransport(replica))
    assert client.get("/v1/requests/req_1/wait") == []


def test_time_spent_failing_is_spent_from_the_budget() -> None:
    calls = 0

    def unreachable(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        time.sleep(0.2)
        raise httpx.ConnectTimeout("timed out", request=request)

    policy = RetryPolicy(attempts=100, budget_s=0.5, backoff_s=0.001, backoff_max_s=0.002)
    client = Client("http://a.test:8000", "tok", retry=policy, transport=httpx.MockTransport(unreachable))
    with pytest.raises(ServerUnreachable):
        client.get("/v1/pools")
    assert calls == 3, "0.2 s failing each: the third passes the 0.5 s budget"
