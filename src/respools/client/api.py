"""``respools.Client``: the REST API in Python.

Two layers. ``get``/``post``/``put``/``delete`` take a path and return the decoded JSON, so the CLI and
scripts can reach every admin resource (pools, policies, subjects, reservations, tokens, events) without
a method per endpoint. The typed methods cover what a step does to hold a lease — submit, wait, heartbeat,
release — and parse answers into the contract's models, so the lease machinery never handles raw dicts.
Every failure is an :class:`ApiError` (the server refused) or :class:`ServerUnreachable` (it did not answer).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

import httpx

from respools.client.config import ClientConfig, load_config
from respools.client.errors import ApiError
from respools.client.transport import IDEMPOTENCY_HEADER, RetryPolicy, Transport
from respools.model import (
    Event,
    EventKind,
    HeartbeatOutcomes,
    Lease,
    Pool,
    Request,
    RequestSpec,
    RequestState,
    WatchedRequests,
)

LONG_POLL_S = 25.0
"""Longest single long-poll; servers accept up to ``max_wait_s`` (300 by default), and a proxy in between
may cut idle connections sooner, so polls stay short and are repeated."""
MIN_LONG_POLL_S = 1.0


def new_idempotency_key() -> str:
    return "rpk_" + uuid.uuid4().hex


class Client:
    """A connection to a respools server.

    ``url`` and ``token`` default to ``RESPOOLS_URL`` / ``RESPOOLS_TOKEN``, then the config file (see
    :mod:`respools.client.config`). ``retry`` tunes how hard each call retries; ``transport`` plugs in an
    ``httpx`` transport (tests use ``httpx.MockTransport``)."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float | None = None,
        config_path: str | os.PathLike[str] | None = None,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.config: ClientConfig = load_config(url, token, timeout, config_path)
        self._transport = Transport(self.config, retry, transport)
        self._long_poll_s = LONG_POLL_S

    @property
    def url(self) -> str:
        return self.config.url

    @property
    def answered(self) -> bool:
        """Whether the server has answered this client at least once."""
        return self._transport.answered

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client(url={self.url!r})"

    # -- any endpoint ------------------------------------------------------------------------------

    def get(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        """``GET path``: the decoded JSON answer."""
        return self._transport.request("GET", path, params=params)

    def post(
        self,
        path: str,
        json: Any = None,
        *,
        params: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> Any:
        """``POST path``. With ``idempotency_key`` (sent as the ``Idempotency-Key`` header, which the
        server honours for requests) a broken connection is retried too."""
        headers = {IDEMPOTENCY_HEADER: idempotency_key} if idempotency_key else None
        return self._transport.request("POST", path, params=params, json=json, headers=headers)

    def put(self, path: str, json: Any = None, *, params: Mapping[str, Any] | None = None) -> Any:
        """``PUT path``: create or replace, so safe to retry."""
        return self._transport.request("PUT", path, params=params, json=json)

    def delete(self, path: str, *, params: Mapping[str, Any] | None = None) -> Any:
        """``DELETE path``: ``None`` for the usual empty answer."""
        return self._transport.request("DELETE", path, params=params)

    # -- requests ----------------------------------------------------------------------------------

    def submit(self, spec: RequestSpec, *, wait: float = 0.0) -> Request:
        """Queue a request. It always carries an idempotency key (``spec.idempotency_key``, or a fresh one),
        so a retry after a lost answer returns the first request instead of queueing a second. With
        ``wait`` the server answers once the request leaves ``pending`` or after that many seconds."""
        if spec.idempotency_key is None:
            spec = spec.model_copy(update={"idempotency_key": new_idempotency_key()})
        body = spec.model_dump(mode="json", exclude_none=True)
        answer = self._transport.request(
            "POST",
            "/v1/requests",
            params={"wait": wait} if wait > 0 else None,
            json=body,
            read_timeout=wait,
            idempotent=True,
        )
        return Request.model_validate(answer)

    def get_request(self, request_id: str) -> Request:
        return Request.model_validate(self.get(f"/v1/requests/{request_id}"))

    def list_requests(
        self,
        *,
        subject: str | None = None,
        states: Sequence[RequestState] | None = None,
        label: str | None = None,
        limit: int = 100,
    ) -> list[Request]:
        params = {"subject": subject, "state": list(states) if states else None, "label": label, "limit": limit}
        return [Request.model_validate(item) for item in self.get("/v1/requests", params)]

    def wait_request(
        self, request_id: str, *, state: RequestState | None = None, timeout: float = LONG_POLL_S
    ) -> Request:
        """Long-poll: the request once its state differs from ``state`` (default: its state at the call),
        or unchanged after ``timeout`` seconds. Servers that allow shorter polls are met halfway."""
        while True:
            poll = max(0.0, min(timeout, self._long_poll_s))
            try:
                answer = self._transport.request(
                    "GET",
                    f"/v1/requests/{request_id}/wait",
                    params={"state": state, "timeout": poll},
                    read_timeout=poll,
                )
            except ApiError as exc:
                if exc.status == 422 and exc.field == "timeout" and poll > MIN_LONG_POLL_S:
                    self._long_poll_s = max(MIN_LONG_POLL_S, poll / 2)
                    continue
                raise
            return Request.model_validate(answer)

    def cancel_request(self, request_id: str) -> Request:
        """Withdraw a request (releasing its lease, if it holds one); a finished request is left as it is."""
        answer = self._transport.request("POST", f"/v1/requests/{request_id}/cancel", idempotent=True)
        return Request.model_validate(answer)

    # -- leases ------------------------------------------------------------------------------------

    def get_lease(self, lease_id: str) -> Lease:
        return Lease.model_validate(self.get(f"/v1/leases/{lease_id}"))

    def list_leases(
        self,
        *,
        subject: str | None = None,
        pool: str | None = None,
        states: Sequence[RequestState] | None = None,
        live: bool = False,
        limit: int = 100,
    ) -> list[Lease]:
        params = {
            "subject": subject,
            "pool": pool,
            "state": list(states) if states else None,
            "live": live or None,
            "limit": limit,
        }
        return [Lease.model_validate(item) for item in self.get("/v1/leases", params)]

    def heartbeat(self, lease_id: str) -> Lease:
        """Renew the lease (the first heartbeat marks it active). The answer's state is ``preempting``
        once it got notice. Renewing is idempotent, so broken connections are retried."""
        answer = self._transport.request("POST", f"/v1/leases/{lease_id}/heartbeat", idempotent=True)
        return Lease.model_validate(answer)

    def checkpoint(self, lease_id: str) -> Lease:
        """Tell the service a checkpoint was taken: a preemption then counts only the work since as lost.
        Retried on a broken connection (a repeat only moves the time a little later)."""
        answer = self._transport.request("POST", f"/v1/leases/{lease_id}/checkpoint", idempotent=True)
        return Lease.model_validate(answer)

    def heartbeat_many(self, lease_ids: Sequence[str]) -> HeartbeatOutcomes:
        """Renew many leases in one call (at most :data:`~respools.model.MAX_BATCH_IDS`): the renewed ones,
        and for each refused one the status its own heartbeat would answer (404, 403, 409)."""
        answer = self._transport.request(
            "POST", "/v1/leases/heartbeat", json={"lease_ids": list(lease_ids)}, idempotent=True
        )
        return HeartbeatOutcomes.model_validate(answer)

    def watch_requests(self, states: Mapping[str, RequestState], *, timeout: float = LONG_POLL_S) -> WatchedRequests:
        """Long-poll many requests at once: those whose state is no longer the one given in ``states``
        (request id → state last seen), as soon as there is one, or none after ``timeout``."""
        poll = max(0.0, min(timeout, self._long_poll_s))
        body = {"requests": {k: v.value for k, v in states.items()}, "timeout": poll}
        answer = self._transport.request("POST", "/v1/requests/watch", json=body, read_timeout=poll, idempotent=True)
        return WatchedRequests.model_validate(answer)

    def release(self, lease_id: str) -> Lease:
        """Give the lease back (idempotent: releasing an ended lease changes nothing)."""
        answer = self._transport.request("POST", f"/v1/leases/{lease_id}/release", idempotent=True)
        return Lease.model_validate(answer)

    def lease_token(self, lease_id: str) -> str:
        """A token that may read, heartbeat and release this lease only, and ends with it: what a job
        started for the lease carries as ``RESPOOLS_TOKEN`` (the lease's subject or an admin asks)."""
        answer = self.post(f"/v1/leases/{lease_id}/token", {})
        token: str = answer["token"]
        return token

    def preempt_lease(self, lease_id: str, *, message: str | None = None, grace_s: float | None = None) -> Lease:
        """Put a lease under preemption notice (admin token)."""
        body = {k: v for k, v in {"message": message, "grace_s": grace_s}.items() if v is not None}
        answer = self._transport.request("POST", f"/v1/leases/{lease_id}/preempt", json=body, idempotent=True)
        return Lease.model_validate(answer)

    def confirm_stopped(self, lease_id: str, *, backend: str, evidence: str, host: str | None = None) -> Lease:
        """Tell the service that a preempting lease's workload is gone (admin token): how a backend or a
        job runner (Kubernetes pods gone, a Vertex AI or Databricks job terminal) ends an overdue lease so
        that its capacity is handed over. ``evidence`` says what was checked, for the event log."""
        body = {"backend": backend, "evidence": evidence} | ({"host": host} if host is not None else {})
        answer = self._transport.request("POST", f"/v1/leases/{lease_id}/stopped", json=body, idempotent=True)
        return Lease.model_validate(answer)

    # -- the rest a lease needs --------------------------------------------------------------------

    def get_pool(self, name: str) -> Pool:
        return Pool.model_validate(self.get(f"/v1/pools/{name}"))

    def events(
        self,
        *,
        after: int = 0,
        limit: int = 100,
        kinds: Sequence[EventKind] | None = None,
        pool: str | None = None,
        subject: str | None = None,
        request_id: str | None = None,
        lease_id: str | None = None,
    ) -> list[Event]:
        """Events after an id, oldest first."""
        params = {
            "after": after,
            "limit": limit,
            "kind": list(kinds) if kinds else None,
            "pool": pool,
            "subject": subject,
            "request_id": request_id,
            "lease_id": lease_id,
        }
        return [Event.model_validate(item) for item in self.get("/v1/events", params)]

    def whoami(self) -> dict[str, Any]:
        """The calling token's role and subject."""
        answer: dict[str, Any] = self.get("/v1/whoami")
        return answer
