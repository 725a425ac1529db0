"""HTTP with retries: one call to the server, repeated when repeating is safe.

Retried: failures to connect (the request never left), and 5xx answers and broken connections *when the
call may be replayed* — GET, PUT and DELETE, and a POST that carries an idempotency key. A POST without a
key is retried only when it surely did not arrive (connect errors) or the server said so (503, nothing
was written), because replaying a half-delivered POST could create a second token or request. 4xx answers
are never retried: the server has decided, and retrying only repeats the refusal. ``Retry-After`` is
honoured as the shortest wait.

Failover. The URL may name several replicas (``RESPOOLS_URL=http://a:8000,http://b:8000``): calls go to
one of them until it fails (a transport error or a 5xx), then to the next, at once; only once every
replica failed in a row does the call back off. Behind a load balancer the URL is one, and the balancer
does the same.

The retry budget counts time spent *failing* — backing off, waiting for a connection that does not come,
an answer that times out, a 5xx — never the time a long-poll spent waiting on a healthy server before
its connection broke. A long-poll that lived 20 s on a replica that was then killed starts its retries
with the whole budget, however many kills it has lived through.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import tenacity

from respools import __version__
from respools.client.config import ClientConfig
from respools.client.errors import ApiError, ServerUnreachable

log = logging.getLogger("respools.client")

_OWN_CALL: contextvars.ContextVar[bool] = contextvars.ContextVar("respools_own_call", default=False)


class _QuietOwnRequests(logging.Filter):
    """httpx logs every request at INFO; a host that logs INFO (ZenML does) printed a line per heartbeat
    and long-poll of every lease, dozens per step. The SDK's own calls are dropped from httpx's log (they
    are on ``respools.client`` at DEBUG); the host's other httpx calls are left as they are."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno > logging.INFO or not _OWN_CALL.get()


logging.getLogger("httpx").addFilter(_QuietOwnRequests())

REPLAYABLE_METHODS = frozenset({"GET", "HEAD", "PUT", "DELETE"})
IDEMPOTENCY_HEADER = "Idempotency-Key"
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
"""Transport errors raised before a byte of the request reached the server."""
_MAX_ERROR_TEXT = 500


@dataclass(frozen=True)
class RetryPolicy:
    """How hard one call tries: ``attempts`` tries per replica URL, while at most ``budget_s`` seconds were
    spent failing, backing off exponentially once every replica failed (with jitter, so many clients
    that lost the same server do not return in lockstep)."""

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


class _FailingTime:
    """Seconds one call's attempts spent failing (see the module docstring); tenacity adds the waits."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.failures = 0

    def add(self, exc: BaseException, seconds: float) -> None:
        self.failures += 1
        if isinstance(exc, (_RetryableStatus, httpx.TimeoutException, *_NOT_SENT)):
            self.seconds += seconds
        # else: a connection that broke after the request was sent (a killed replica mid long-poll): the
        # time before the break was spent on a healthy server, not failing.


class _StopAfterFailing(tenacity.stop.stop_base):
    def __init__(self, budget_s: float, failing: _FailingTime) -> None:
        self._budget_s = budget_s
        self._failing = failing

    def __call__(self, retry_state: tenacity.RetryCallState) -> bool:
        return self._failing.seconds + retry_state.idle_for >= self._budget_s


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
        self.urls = config.urls
        self.failovers = 0
        """How often this client moved to another replica's URL."""
        self._current = 0
        self._lock = threading.Lock()
        headers = {"User-Agent": f"respools-client/{__version__}", "Accept": "application/json"}
        if config.token:
            headers["Authorization"] = f"Bearer {config.token}"
        self._http = httpx.Client(
            headers=headers,
            timeout=config.timeout,
            transport=transport,
            # A long-poll and a heartbeat run at once per lease; several leases may share a client.
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=16),
        )

    @property
    def url(self) -> str:
        """The replica calls go to now."""
        return self.urls[self._current]

    def _fail_over(self, failed: int) -> None:
        """Move to the next replica, unless another thread moved already since ``failed`` was chosen."""
        if len(self.urls) < 2:
            return
        with self._lock:
            if self._current != failed:
                return
            self._current = (failed + 1) % len(self.urls)
            self.failovers += 1
        log.warning("respools server %s failed; calls go to %s now", self.urls[failed], self.urls[self._current])

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

        failing = _FailingTime()

        def send() -> httpx.Response:
            index = self._current
            started = time.monotonic()
            own = _OWN_CALL.set(True)
            try:
                response = self._http.request(
                    method, self.urls[index] + path, params=_clean(params), json=json, headers=headers, timeout=timeout
                )
            except httpx.TransportError as exc:
                failing.add(exc, time.monotonic() - started)
                self._fail_over(index)
                raise
            finally:
                _OWN_CALL.reset(own)
            log.debug("%s %s -> %s", method, path, response.status_code)
            self.answered = True
            if response.status_code >= 500 and (replayable or response.status_code == 503):
                failed = _RetryableStatus(response)
                failing.add(failed, time.monotonic() - started)
                self._fail_over(index)
                raise failed
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
        replicas = len(self.urls)

        def wait(state: tenacity.RetryCallState) -> float:
            outcome = state.outcome
            failure = outcome.exception() if outcome is not None else None
            if failing.failures % replicas:
                return 0.0  # another replica has not failed in this round yet: try it at once
            backoff = backoff_wait(state)
            if isinstance(failure, _RetryableStatus):
                return max(backoff, _retry_after(failure.response))
            return float(backoff)

        def before_sleep(state: tenacity.RetryCallState) -> None:
            outcome = state.outcome
            failure = outcome.exception() if outcome is not None else None
            what = f"HTTP {failure.response.status_code}" if isinstance(failure, _RetryableStatus) else repr(failure)
            log.info("%s %s failed (%s); retry %d", method, path, what, state.attempt_number)

        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(policy.attempts * replicas) | _StopAfterFailing(policy.budget_s, failing),
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
