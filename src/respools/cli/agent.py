"""``respools agent --pool NAME``: keeps this host's GPUs registered in a local pool.

Every interval the agent discovers the host's GPUs through NVML and ``PUT``s them to
``/v1/pools/{pool}/hosts/{host}`` (the heartbeat: a host whose heartbeats stop is aged out by the server,
which takes its GPUs out of the pool but keeps existing leases' records, so the agent deletes nothing when
it stops). It also runs the NVML watchdog and posts over-use to ``/v1/leases/{id}/overuse``, stops the
workload of a local lease whose preemption deadline passed (or that was preempted or expired) when its
holder is still running here, and confirms to ``/v1/leases/{id}/stopped`` that a preempting lease's
workload is gone (its process group and its NVML compute processes), which hands its GPUs over.

The loop is a plain object with injected HTTP transport, clock and wait, so tests drive it tick by tick.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import FrameType
from typing import Annotated, Any

import httpx
import tenacity
import typer
from pydantic import ValidationError

from respools.backends.local import DiscoveryError, LocalBackend
from respools.backends.local.hostname import HOST_NAME_ENV, normalize_host_name
from respools.backends.local.nvml import nvml_session
from respools.backends.local.watchdog import OveruseEvent, Watchdog
from respools.backends.protocol import BackendError
from respools.cli import app
from respools.client.config import split_urls
from respools.model import Host, Lease, PoolSpec, RequestState

log = logging.getLogger("respools.agent")

DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_INTERVAL_S = 15.0
RETRY_STATUSES = frozenset({429, 502, 503, 504})
STOP_STATES = frozenset({RequestState.PREEMPTED, RequestState.EXPIRED})


class AgentError(RuntimeError):
    """A condition the agent cannot serve (wrong stack); the message is one line for the operator."""


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, httpx.TransportError):
        return True
    return isinstance(exc, httpx.HTTPStatusError) and exc.response.status_code in RETRY_STATUSES


def describe(exc: Exception) -> str:
    """One line for a failed request: method, path, status and the server's ``detail``."""
    if isinstance(exc, httpx.HTTPStatusError):
        request, response = exc.request, exc.response
        try:
            detail = response.json().get("detail", "")
        except ValueError:
            detail = response.text[:200]
        return f"{request.method} {request.url.path}: {response.status_code} {response.reason_phrase} {detail}"
    if isinstance(exc, httpx.RequestError):
        return f"{exc.request.method} {exc.request.url}: {type(exc).__name__}: {exc}"
    return f"{type(exc).__name__}: {exc}"


class ServerApi:
    """The few respools server endpoints the agent uses, with retries for transient failures."""

    def __init__(
        self,
        client: httpx.Client,
        *,
        attempts: int = 3,
        wait: tenacity.wait.wait_base | None = None,
        urls: Sequence[str] = (),
    ) -> None:
        self.client = client
        self._urls = list(urls)
        """Replica URLs (``RESPOOLS_URL`` may list several): a transient failure moves to the next."""
        self._attempts = attempts
        self._wait = wait if wait is not None else tenacity.wait_exponential(multiplier=0.5, max=4)

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(_transient),
            stop=tenacity.stop_after_attempt(self._attempts),
            wait=self._wait,
            reraise=True,
        )
        for attempt in retrying:
            with attempt:
                try:
                    response = self.client.request(method, path, **kwargs)
                    response.raise_for_status()
                except Exception as exc:
                    if _transient(exc):
                        self._fail_over()
                    raise
        return response

    def _fail_over(self) -> None:
        if len(self._urls) > 1:
            current = str(self.client.base_url).rstrip("/")
            following = self._urls[(self._urls.index(current) + 1) % len(self._urls)] if current in self._urls else None
            self.client.base_url = following or self._urls[0]

    def put_host(self, pool: str, host: Host) -> None:
        self._request("PUT", f"/v1/pools/{pool}/hosts/{host.name}", json=host.model_dump(mode="json"))

    def get_pool(self, pool: str) -> PoolSpec:
        data = self._request("GET", f"/v1/pools/{pool}").json()
        # The server answers a stored Pool (timestamps and whatever it adds); the agent needs the spec.
        return PoolSpec.model_validate({k: v for k, v in data.items() if k in PoolSpec.model_fields})

    def get_lease(self, lease_id: str) -> Lease | None:
        try:
            data = self._request("GET", f"/v1/leases/{lease_id}").json()
        except httpx.HTTPStatusError as exc:
            if exc.response.status_code == httpx.codes.NOT_FOUND:
                return None
            raise
        return Lease.model_validate(data)

    def post_overuse(self, event: OveruseEvent) -> None:
        self._request("POST", f"/v1/leases/{event.lease_id}/overuse", json=event.model_dump(mode="json"))

    def post_stopped(self, lease_id: str, backend: str, evidence: str, host: str) -> None:
        body = {"backend": backend, "evidence": evidence, "host": host}
        self._request("POST", f"/v1/leases/{lease_id}/stopped", json=body)


@dataclass
class TickReport:
    """What one tick did; the tests read it, the loop logs it."""

    registered: Host | None = None
    discovery_error: str | None = None
    overuse: list[OveruseEvent] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    confirmed: list[str] = field(default_factory=list)
    """Leases whose stop this tick confirmed to the server."""
    errors: list[str] = field(default_factory=list)


class HostAgent:
    """One host's agent for one local pool."""

    def __init__(
        self,
        pool: str,
        api: ServerApi,
        backend: LocalBackend,
        *,
        watchdog: Watchdog | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.pool_name = pool
        self.api = api
        self.backend = backend
        self.watchdog = watchdog or Watchdog(backend.host, api.post_overuse, registry=backend.registry)
        self.now = now
        self.pool = PoolSpec(name=pool)
        """Last pool spec read from the server (its settings steer the watchdog and stopping)."""
        self._last_reason: str | None = None
        self._last_gpus: list[str] | None = None

    def tick(self) -> TickReport:
        report = TickReport()
        self._refresh_pool(report)
        self._heartbeat(report)
        self._watch(report)
        self._enforce(report)
        for error in report.errors:
            log.warning("%s", error)
        return report

    def run(self, wait: Callable[[float], bool], interval_s: float) -> None:
        """Tick until ``wait(interval_s)`` answers true (a stop event was set)."""
        while True:
            try:
                self.tick()
            except AgentError:
                raise
            except Exception:
                # A daemon outlives one bad tick; the traceback is for whoever files the bug.
                log.exception("agent tick failed; trying again in %.0f s", interval_s)
            if wait(interval_s):
                return

    def _refresh_pool(self, report: TickReport) -> None:
        try:
            pool = self.api.get_pool(self.pool_name)
        except (httpx.HTTPError, ValidationError, ValueError) as exc:
            report.errors.append(f"pool {self.pool_name}: settings not refreshed ({describe(exc)})")
            return
        if pool.stack != self.backend.name:
            raise AgentError(f"pool {pool.name!r} is on stack {pool.stack!r}; the host agent serves local pools only")
        self.pool = pool

    def _heartbeat(self, report: TickReport) -> None:
        found = self.backend.discover_local()
        if found.host is None:
            report.discovery_error = found.reason
            if found.reason != self._last_reason:
                log.warning("host %s: %s", self.backend.host, found.reason)
            self._last_reason = found.reason
            return
        self._last_reason = None
        try:
            self.api.put_host(self.pool_name, found.host)
        except httpx.HTTPError as exc:
            report.errors.append(f"heartbeat failed: {describe(exc)}")
            return
        report.registered = found.host
        gpus = [f"{gpu.index}:{gpu.model}" for gpu in found.host.gpus]
        if gpus != self._last_gpus:
            log.info("host %s registered in pool %s: %s", found.host.name, self.pool_name, ", ".join(gpus))
            self._last_gpus = gpus

    def _watch(self, report: TickReport) -> None:
        try:
            report.overuse = self.watchdog.scan(self.pool)
        except (DiscoveryError, BackendError) as exc:
            if report.discovery_error is None:
                report.errors.append(f"watchdog: {exc}")

    def _enforce(self, report: TickReport) -> None:
        """Stop registered workloads whose lease the server has taken back, and confirm to the server
        the stop of every preempting lease whose workload is gone from here: an overdue lease keeps its
        GPUs until then (DESIGN §2.8)."""
        unconfirmed: set[str] = set()
        for holder in self.backend.registry.registered():
            if holder.pool != self.pool_name or holder.host != self.backend.host:
                continue
            try:
                lease = self.api.get_lease(holder.lease_id)
            except (httpx.HTTPError, ValidationError, ValueError) as exc:
                report.errors.append(f"lease {holder.lease_id}: state unknown ({describe(exc)})")
                unconfirmed.add(holder.lease_id)
                continue
            if lease is None or not self._must_stop(lease):
                continue
            if self.backend.registry.get(lease.id) is not None:
                self.backend.stop(lease, self.pool)
                report.stopped.append(lease.id)
            if lease.state is RequestState.PREEMPTING and not self._confirm(lease, report):
                unconfirmed.add(lease.id)
        self.backend.registry.prune(keep=unconfirmed)

    def _confirm(self, lease: Lease, report: TickReport) -> bool:
        """Tell the server the lease's workload is gone, if it is; False while it is not (or unsaid)."""
        evidence = self.backend.confirm_stopped(lease, self.pool)
        if evidence is None:
            return False
        try:
            self.api.post_stopped(lease.id, self.backend.name, evidence, self.backend.host)
        except httpx.HTTPError as exc:
            report.errors.append(f"lease {lease.id}: stop not confirmed ({describe(exc)})")
            return False
        report.confirmed.append(lease.id)
        return True

    def _must_stop(self, lease: Lease) -> bool:
        if lease.state in STOP_STATES:
            return True
        deadline = lease.preempt_deadline
        if lease.state is not RequestState.PREEMPTING or deadline is None:
            return False
        if lease.overdue_since is not None:
            return True
        if deadline.tzinfo is None:
            deadline = deadline.replace(tzinfo=UTC)  # the API speaks UTC
        return deadline <= self.now()


def _first_line(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        error = exc.errors()[0]
        return f"{'.'.join(str(p) for p in error['loc'])}: {error['msg']}"
    return str(exc).splitlines()[0]


def build_client(
    url: str, token: str | None, transport: httpx.BaseTransport | None = None, timeout_s: float = 10.0
) -> httpx.Client:
    """A client on the first of the replica URLs ``url`` lists (``ServerApi`` moves along them)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=split_urls(url)[0], headers=headers, timeout=timeout_s, transport=transport)


_transport: httpx.BaseTransport | None = None
"""Transport for the CLI's client; ``None`` is the network (tests put an ``httpx.MockTransport`` here)."""


@contextlib.contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    def handler(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %d: stopping (the server ages this host out; nothing is deleted)", signum)
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@app.command("agent")
def agent_command(
    pool: Annotated[str, typer.Option("--pool", help="local pool this host's GPUs belong to")],
    url: Annotated[
        str, typer.Option("--url", envvar="RESPOOLS_URL", help="respools server (several replicas: comma-separated)")
    ] = DEFAULT_URL,
    token: Annotated[
        str | None, typer.Option("--token", envvar="RESPOOLS_TOKEN", help="bearer token", show_default=False)
    ] = None,
    interval: Annotated[
        float, typer.Option("--interval", min=1.0, help="seconds between heartbeats")
    ] = DEFAULT_INTERVAL_S,
    host_name: Annotated[
        str | None,
        typer.Option("--host-name", envvar=HOST_NAME_ENV, help="name in the pool (default: hostname)"),
    ] = None,
    once: Annotated[bool, typer.Option("--once", help="one heartbeat, then exit (checks the setup)")] = False,
) -> None:
    """Register this host's GPUs in a local pool, heartbeat them, and watch for over-use."""
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        backend = LocalBackend(host=normalize_host_name(host_name) if host_name else None)
        PoolSpec(name=pool)
    except (ValueError, ValidationError) as exc:
        typer.echo(f"respools agent: {_first_line(exc)}", err=True)
        raise typer.Exit(code=2) from None
    stop = threading.Event()
    with build_client(url, token, _transport) as client, contextlib.ExitStack() as nvml:
        with contextlib.suppress(DiscoveryError):
            nvml.enter_context(nvml_session())  # one session for the agent's life; each tick reuses it
        agent = HostAgent(pool, ServerApi(client, urls=split_urls(url)), backend)
        log.info("agent for pool %s as host %s, server %s, every %.0f s", pool, backend.host, url, interval)
        try:
            if once:
                report = agent.tick()
                if report.registered is None:
                    reason = report.discovery_error or "; ".join(report.errors)
                    typer.echo(f"respools agent: host {backend.host} not registered: {reason}", err=True)
                    raise typer.Exit(code=1)
                return
            with _stop_on_signals(stop):
                agent.run(stop.wait, interval)
        except AgentError as exc:
            typer.echo(f"respools agent: {exc}", err=True)
            raise typer.Exit(code=2) from None
