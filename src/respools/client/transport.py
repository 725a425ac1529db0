"""HTTP with retries: one call to the server, repeated when repeating is safe.

Retried: failures to connect (the request never left), and 5xx answers and broken connections *when the
call may be replayed* — GET, PUT and DELETE, and a POST that carries an idempotency key. A POST without a
key is retried only when it surely did not arrive (connect errors) or the server said so (503, nothing
was written), because replaying a half-delivered POST could create a second token or request. 4xx answers
are never retried: the server has decided, and retrying only repeats the refusal. ``Retry-After`` is
honoured as the shortest wait.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import tenacity

from respools import __version__
from respools.client.config import ClientConfig
from respools.client.errors import ApiError, ServerUnreachable

log = logging.getLogger("respools.client")

REPLAYABLE_METHODS = frozenset({"GET", "HEAD", "PUT", "DELETE"})
IDEMPOTENCY_HEADER = "Idempotency-Key"
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
"""Transport errors raised before a byte of the request reached the server."""
_MAX_ERROR_TEXT = 500


@dataclass(frozen=True)
class RetryPolicy:
    """How hard one call tries: ``attempts`` tries within ``budget_s`` seconds, backing off exponentially
    (with jitter, so many clients that lost the same server do not return in lockstep)."""

    attempts: int = 6
    budget_s: float = 30.0
    backoff_s: float = 0.2
    backoff_max_s: float = 5.0


NO_RETRY = RetryPolicy(attempts=1)


class _RetryableStatus(Exception):
    """A 5xx answer worth another try; carries the response for the final error."""

    def __init__(self, response: httpx.Response) -> None:
        super().__init__(response.status_code)
        self.response = response


def _retry_after(response: httpx.Response) -> float:
    value = response.headers.get("Retry-After", "")
    try:
        return max(0.0, float(value))
    except ValueError:
        return 0.0


def error_from_response(response: httpx.Response, token_configured: bool = True) -> ApiError:
    """An :class:`ApiError` from the server's ``ErrorBody`` (or whatever a proxy answered instead)."""
    detail: str | None = None
    field: str | None = None
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("detail"), str):
        detail = body["detail"]
        field = body.get("field") if isinstance(body.get("field"), str) else None
    elif isinstance(body, dict) and body.get("detail") is not None:
        detail = str(body["detail"])
    if detail is None:
        text = response.text.strip()[:_MAX_ERROR_TEXT]
        detail = text or response.reason_phrase or "no detail given"
    if response.status_code == 401 and not token_configured:
        detail += " (no token is configured: pass token=, set RESPOOLS_TOKEN or put token in the config file)"
    return ApiError(response.status_code, detail, field)


class Transport:
    """One ``httpx.Client`` bound to the server, with the retry rules above. Safe to share between
    threads (a lease's heartbeat thread uses it while the step's thread does too)."""

    def __init__(
        self,
        config: ClientConfig,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.config = config
        self.retry = retry or RetryPolicy()
        self.answered = False
        """Whether the server has answered at least once: a server that has never answered is likely
        misconfigured, one that stopped answering is likely restarting."""
        headers = {"User-Agent": f"respools-client/{__version__}", "Accept": "application/json"}
        if config.token:
            headers["Authorization"] = f"Bearer {config.token}"
        self._http = httpx.Client(
            base_url=config.url,
            headers=headers,
            timeout=config.timeout,
            transport=transport,
            # A long-poll and a heartbeat run at once per lease; several leases may share a client.
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=16),
        )

    def close(self) -> None:
        self._http.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
        read_timeout: float | None = None,
        idempotent: bool | None = None,
        retry: RetryPolicy | None = None,
    ) -> Any:
        """Send, retry where safe, and decode: the answer's JSON (``None`` for an empty answer).

        ``read_timeout`` extends the wait for the answer (long-polls); ``idempotent`` overrides the
        method's default replay safety."""
        method = method.upper()
        replayable = (
            idempotent
            if idempotent is not None
            else method in REPLAYABLE_METHODS or bool(headers and IDEMPOTENCY_HEADER in headers)
        )
        policy = retry or self.retry
        timeout = httpx.Timeout(self.config.timeout, read=self.config.timeout + (read_timeout or 0.0))

        def send() -> httpx.Response:
            response = self._http.request(
                method, path, params=_clean(params), json=json, headers=headers, timeout=timeout
            )
            self.answered = True
            if response.status_code >= 500 and (replayable or response.status_code == 503):
                raise _RetryableStatus(response)
            return response

        def worth_retrying(exc: BaseException) -> bool:
            if isinstance(exc, _RetryableStatus):
                return True
            if isinstance(exc, _NOT_SENT):
                return True
            return replayable and isinstance(exc, httpx.TransportError)

        backoff_wait = tenacity.wait_exponential(multiplier=policy.backoff_s, max=policy.backoff_max_s) + (
            tenacity.wait_random(0, policy.backoff_s)
        )

        def wait(state: tenacity.RetryCallState) -> float:
            backoff = backoff_wait(state)
            outcome = state.outcome
            failure = outcome.exception() if outcome is not None else None
            if isinstance(failure, _RetryableStatus):
                return max(backoff, _retry_after(failure.response))
            return float(backoff)

        def before_sleep(state: tenacity.RetryCallState) -> None:
            outcome = state.outcome
            failure = outcome.exception() if outcome is not None else None
            what = f"HTTP {failure.response.status_code}" if isinstance(failure, _RetryableStatus) else repr(failure)
            log.info("%s %s failed (%s); retry %d", method, path, what, state.attempt_number)

        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(policy.attempts) | tenacity.stop_after_delay(policy.budget_s),
            wait=wait,
            retry=tenacity.retry_if_exception(worth_retrying),
            before_sleep=before_sleep,
            reraise=True,
        )
        try:
            response = retrying(send)
        except _RetryableStatus as exc:
            response = exc.response
        except httpx.TransportError as exc:
            raise ServerUnreachable(self.config.url, exc) from exc
        if response.status_code >= 400:
            raise error_from_response(response, token_configured=self.config.token is not None)
        if response.status_code == 204 or not response.content:
            return None
        try:
            return response.json()
        except ValueError as exc:
            raise ApiError(response.status_code, f"the server answered {path} with non-JSON: {exc}") from exc


def _clean(params: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Query parameters without the ``None`` ones, booleans as the server spells them."""
    if params is None:
        return None
    out: dict[str, Any] = {}
    for key, value in params.items():
        if value is None:
            continue
        if isinstance(value, bool):
            out[key] = "true" if value else "false"
        elif isinstance(value, list | tuple):
            out[key] = [str(v.value if hasattr(v, "value") else v) for v in value]
        else:
            out[key] = value.value if hasattr(value, "value") else value
    return out
