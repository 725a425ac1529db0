"""What the client raises. Steps catch :class:`LeasePreempted` to checkpoint; everything else says what
went wrong in terms a data scientist can act on, and carries the server's words where there are some.

:class:`LeasePreempted` and :class:`LeaseLost` may arrive *asynchronously* in the thread that holds a lease
(see :mod:`respools.client.delivery`). CPython raises such an exception by calling its class with no
arguments, so each delivery uses a one-off subclass that carries the details as defaults; it still
``isinstance``-matches, prints and pickles as the public class.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar, TypeVar

from respools.model import Lease, PreemptReason, Request, RequestState


class RespoolsError(Exception):
    """Base of every error the respools client raises."""


class ConfigError(RespoolsError):
    """The client configuration (arguments, ``RESPOOLS_*`` variables, config file) is incomplete or invalid."""


class ApiError(RespoolsError):
    """The server refused a call: its HTTP status, its ``detail`` sentence and the ``field`` at fault."""

    def __init__(self, status: int, detail: str, field: str | None = None) -> None:
        super().__init__(status, detail, field)
        self.status = status
        self.detail = detail
        self.field = field

    def __str__(self) -> str:
        where = f" [{self.field}]" if self.field else ""
        return f"{self.status}: {self.detail}{where}"


class ServerUnreachable(RespoolsError):
    """The server did not answer (connection refused, reset, timed out) after the client's retries."""

    def __init__(self, url: str, cause: BaseException) -> None:
        super().__init__(url, cause)
        self.url = url
        self.cause = cause

    def __str__(self) -> str:
        return f"respools server at {self.url} is unreachable ({type(self.cause).__name__}: {self.cause})"


class LeaseError(RespoolsError):
    """Base of the errors of a lease's lifecycle."""


class NotGranted(LeaseError):
    """The request ended without a lease: rejected (it can never fit), cancelled, or ended otherwise."""

    def __init__(self, request: Request) -> None:
        super().__init__(request)
        self.request = request

    def __str__(self) -> str:
        why = f": {self.request.reason}" if self.request.reason else ""
        return f"request {self.request.id} was {self.request.state.value}{why}"

    @property
    def state(self) -> RequestState:
        return self.request.state


class WaitTimeout(LeaseError):
    """No grant within the caller's ``timeout``; the request was cancelled."""

    def __init__(self, request: Request, waited_s: float) -> None:
        super().__init__(request, waited_s)
        self.request = request
        self.waited_s = waited_s

    def __str__(self) -> str:
        request = self.request
        where = f" (position {request.queue_position} in the queue)" if request.queue_position is not None else ""
        why = f": {request.reason}" if request.reason else ""
        return f"request {request.id} not granted after {self.waited_s:.0f} s{where}{why}; cancelled it"


class NoActiveLease(LeaseError, LookupError):
    """:func:`respools.current_lease` was called outside a lease."""


_D = TypeVar("_D", bound="_Delivered")


class _Delivered(LeaseError):
    """Shared machinery of the exceptions that can be delivered asynchronously."""

    _defaults: ClassVar[dict[str, Any]] = {}
    _public: ClassVar[type[_Delivered]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "_public" not in cls.__dict__ and "_defaults" not in cls.__dict__:
            cls._public = cls  # a public class; one-off delivery subclasses inherit it

    @classmethod
    def prepared(cls: type[_D], **details: Any) -> type[_D]:
        """A subclass whose no-argument construction (how CPython raises async exceptions) yields an
        exception with ``details``."""
        namespace = {
            "_defaults": details,
            "_public": cls._public,
            "__module__": cls.__module__,
            "__qualname__": cls.__qualname__,
        }
        return type(cls.__name__, (cls,), namespace)

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuild as the public class: the one-off subclass cannot be imported by name.
        return (self._public._rebuild, (self.__dict__.copy(), self.args))

    @classmethod
    def _rebuild(cls, state: dict[str, Any], args: tuple[Any, ...]) -> _Delivered:
        exc = cls.__new__(cls)
        exc.args = args
        exc.__dict__.update(state)
        return exc


class LeaseLost(_Delivered):
    """The lease ended while the step still held it: it expired (heartbeats stopped), was cancelled, or was
    revoked at its preemption deadline.

    ``requeued`` is filled in when the lease context exits: true when the server put the request back in
    the queue for another attempt (a retry loop then runs the step again)."""

    def __init__(
        self,
        message: str | None = None,
        *,
        lease: Lease | None = None,
        state: RequestState | None = None,
    ) -> None:
        defaults = type(self)._defaults
        self.lease: Lease | None = lease if lease is not None else defaults.get("lease")
        self.state: RequestState | None = state if state is not None else defaults.get("state")
        self.requeued = False
        self.next_attempt: int | None = None
        text = message or defaults.get("message") or self._describe()
        super().__init__(text)

    def _describe(self) -> str:
        lease_id = self.lease.id if self.lease else "?"
        return f"lease {lease_id} ended ({self.state.value if self.state else 'unknown'})"

    @property
    def attempt(self) -> int:
        """The attempt (0 for the first run) that lost its lease."""
        return self.lease.attempt if self.lease is not None else 0


class LeasePreempted(LeaseLost):
    """The lease got preemption notice: the step should checkpoint and stop before ``deadline``.

    Raised in the thread that holds the lease within about a second of the scheduler's decision; also by
    :meth:`LeaseSession.check`. Catch it to write a checkpoint, then let it propagate (or re-raise it) so
    that a retry loop (``@respools.requires``, ``respools run``) can run the step again once the request is
    back at its place in the queue."""

    def __init__(
        self,
        message: str | None = None,
        *,
        lease: Lease | None = None,
        deadline: datetime | None = None,
        reason: PreemptReason | None = None,
    ) -> None:
        defaults = type(self)._defaults
        self.deadline: datetime | None = deadline if deadline is not None else defaults.get("deadline")
        self.reason: PreemptReason | None = reason if reason is not None else defaults.get("reason")
        self.detail: str | None = defaults.get("detail")
        super().__init__(message, lease=lease, state=RequestState.PREEMPTING)

    def _describe(self) -> str:
        lease_id = self.lease.id if self.lease else "?"
        why = f": {self.detail}" if self.detail else f" ({self.reason.value})" if self.reason else ""
        left = self.time_left
        when = f"; {left:.1f} s left before its deadline" if left is not None else ""
        return f"lease {lease_id} is being preempted{why}{when}"

    @property
    def time_left(self) -> float | None:
        """Seconds until the grace deadline (negative once it passed), by this machine's clock."""
        if self.deadline is None:
            return None
        return (self.deadline - datetime.now(UTC)).total_seconds()
