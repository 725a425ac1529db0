"""What a waiting step shows: on an interactive terminal one live line (position in the queue, why it
waits, how long it has waited), since a step that sits silently in a queue looks hung; elsewhere (CI logs,
batch jobs) a log record whenever the position or the reason changes, since redrawn lines would flood a
log file.
"""

from __future__ import annotations

import logging
import time
from types import TracebackType

from rich.console import Console, RenderableType
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text

from respools.model import Request, RequestSpec, RequestState, format_resources

log = logging.getLogger("respools.client")

INTERACTIVE_POLL_S = 2.0
"""Long-poll length on a terminal: the server wakes a poll only when the state changes, so the shown
position and reason are refreshed this often."""


def describe_spec(spec: RequestSpec) -> str:
    asked = {k: v for k, v in spec.resources.items() if k != "step_run"} or spec.resources
    pools = f" on {', '.join(spec.pools)}" if spec.pools else ""
    return f"{format_resources(asked)}{pools}"


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class _Line:
    """The live line; re-rendered by rich a few times a second, so the waited time ticks."""

    def __init__(self, progress: WaitProgress) -> None:
        self._progress = progress
        self._spinner = Spinner("dots", style="cyan")

    def __rich__(self) -> RenderableType:
        self._spinner.update(text=Text(self._progress.describe()))
        return self._spinner


class WaitProgress:
    """Shows the wait for one request; a context manager around the waiting loop."""

    def __init__(self, spec: RequestSpec, *, interactive: bool | None = None, console: Console | None = None) -> None:
        self._console = console or Console(stderr=True)
        self.interactive = self._console.is_terminal if interactive is None else interactive
        self._what = describe_spec(spec)
        self._started = time.monotonic()
        self._request: Request | None = None
        self._note: str | None = None
        self._live: Live | None = None
        self._logged: tuple[object, ...] | None = None

    @property
    def poll_s(self) -> float | None:
        """How long one long-poll may last so the display stays fresh (``None``: as long as it likes)."""
        return INTERACTIVE_POLL_S if self.interactive else None

    def __enter__(self) -> WaitProgress:
        self._started = time.monotonic()
        if self.interactive:
            self._live = Live(_Line(self), console=self._console, refresh_per_second=4, transient=True)
            self._live.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def update(self, request: Request) -> None:
        self._request = request
        self._note = None
        self._log_change()

    def note(self, text: str | None) -> None:
        """A passing remark (the server is unreachable, retrying) shown until the next update."""
        if text and text != self._note and not self.interactive:
            log.warning("waiting for %s: %s", self._what, text)
        self._note = text

    def describe(self) -> str:
        parts = [f"waiting for {self._what}"]
        request = self._request
        if request is not None:
            if request.attempt:
                parts.append(f"attempt {request.attempt + 1}")
            if request.queue_position is not None:
                parts.append(f"position {request.queue_position} in the queue")
            if request.reason:
                parts.append(request.reason)
            elif request.wait_reason is not None:
                parts.append(request.wait_reason.value.replace("_", " "))
        if self._note:
            parts.append(self._note)
        parts.append(f"waited {_clock(time.monotonic() - self._started)}")
        return " · ".join(parts)

    def _log_change(self) -> None:
        if self.interactive or self._request is None or self._request.state != RequestState.PENDING:
            return  # a request granted (or refused) at once was never waited for: nothing to say about a wait
        request = self._request
        key = (request.state, request.queue_position, request.wait_reason, request.reason)
        if key != self._logged:
            self._logged = key
            log.info("request %s: %s", request.id, self.describe())
