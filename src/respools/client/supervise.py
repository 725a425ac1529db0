"""``respools run``'s engine: hold a lease for a child process, and pass preemption on as signals.

The child runs in a process group of its own, so that a signal reaches all of it — DataLoader workers and
``torchrun`` ranks included — and so that stopping it never stops us. On notice the group gets
SIGTERM at once (the grace is the child's to checkpoint in) and SIGKILL at the deadline, when the server
hands the capacity to someone else. If the server requeued the request, the command runs again once the
request is granted again, with ``RESPOOLS_ATTEMPT`` telling it which attempt it is. The exit status is the
last run's, shell style (128 + the signal for a child ended by a signal; 127 when the command is not found).

Signals sent to ``respools run`` itself (Ctrl-C, SIGTERM from a batch system) are forwarded to the child,
which then ends the run without a rerun; while still waiting for a grant they cancel the request.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from types import FrameType

from respools.backends.local import procfs
from respools.client.api import Client
from respools.client.environment import realize, register_local_holder, unregister_local_holder
from respools.client.errors import LeaseLost, LeasePreempted
from respools.client.holding import Holding
from respools.client.queue import QueueEntry
from respools.client.retry import Backoff
from respools.client.terminal import TerminalLoan
from respools.model import RequestSpec

log = logging.getLogger("respools.client")

LOST_KILL_AFTER_S = 5.0
"""SIGTERM-to-SIGKILL gap when the lease ended without notice (expired, cancelled): it is gone already."""
POLL_S = 0.05
REAP_WAIT_S = 5.0
"""Longest wait for a killed process group to be gone before the lease is released anyway."""
NOT_FOUND = 127
NOT_EXECUTABLE = 126
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

Say = Callable[[str], None]


class Interrupted(BaseException):
    """``respools run`` got a signal while no child was running (waiting for a grant, or between attempts)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def exit_status(returncode: int) -> int:
    """A shell's view of a child's end: its code, or 128 + the signal that ended it."""
    return 128 - returncode if returncode < 0 else returncode


class Child:
    """One run of the command, in a process group of its own (and in the foreground of our terminal, if
    we have one: see :mod:`respools.client.terminal`)."""

    def __init__(self, argv: Sequence[str], env: dict[str, str], terminal: TerminalLoan) -> None:
        self.process = subprocess.Popen(list(argv), env=env, process_group=0)
        self.pgid = self.process.pid
        self.terminated_at: float | None = None
        self.killed = False
        self._terminal = terminal
        terminal.lend(self.pgid)

    def give_back_terminal(self) -> None:
        self._terminal.take_back()

    def signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, signum)

    def terminate(self) -> None:
        if self.terminated_at is None:
            self.terminated_at = time.monotonic()
        self.signal(signal.SIGTERM)

    def kill(self) -> None:
        self.killed = True
        self.signal(signal.SIGKILL)

    def reap_group(self) -> None:
        """The leader exited; its group may not have. Leftover workers would keep the GPUs the lease no
        longer holds, so they get the same treatment as at a deadline, and the lease is released only
        once the group is gone (or :data:`REAP_WAIT_S` passed): the service hands the GPUs over on that
        release (DESIGN §2.8)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, 0)
            os.killpg(self.pgid, signal.SIGKILL)
        deadline = time.monotonic() + REAP_WAIT_S
        while next(procfs.group_members(self.pgid), None) is not None and time.monotonic() < deadline:
            time.sleep(POLL_S / 5)


@dataclass
class Attempt:
    """What one attempt of the run saw, filled in by the heartbeat thread and the main loop."""

    child: Child | None = None
    kill_at: float | None = None
    """``time.monotonic()`` at which the group gets SIGKILL."""
    stopped: bool = False
    """The child was still running when the lease's news made us signal it: the run did not finish."""
    lock: threading.Lock = field(default_factory=threading.Lock)


class Supervisor:
    """Runs ``argv`` under a lease for ``spec`` until it ends without a preemption that requeued it."""

    def __init__(
        self,
        client: Client,
        spec: RequestSpec,
        argv: Sequence[str],
        *,
        backoff: Backoff | None = None,
        timeout: float | None = None,
        progress: bool | None = None,
        say: Say | None = None,
    ) -> None:
        if not argv:
            raise ValueError("give the command to run after --, e.g. respools run --gpu 1 -- python train.py")
        self.client = client
        self.argv = list(argv)
        shown = shlex.join(self.argv)
        self._shown = shown if len(shown) <= 120 else shown[:117] + "..."
        self.backoff = backoff or Backoff()
        self.say: Say = say or (lambda text: log.warning("%s", text))
        self.queue = QueueEntry(client, spec, timeout=timeout, progress=progress)
        self._attempt = Attempt()
        self._forwarded: int | None = None
        self._terminal = TerminalLoan()

    def run(self) -> int:
        """The command's exit status (of its last run)."""
        try:
            with self._signals():
                while True:
                    status, rerun = self._one_attempt()
                    if not rerun:
                        return status
        except Interrupted as exc:
            self.say(f"interrupted by signal {exc.signum} before the command ran")
            return 128 + exc.signum
        finally:
            self.queue.withdraw()

    # -- one attempt -------------------------------------------------------------------------------

    def _one_attempt(self) -> tuple[int, bool]:
        request = self.queue.wait_for_grant()
        attempt = self._attempt = Attempt()
        holding = Holding(self.client, request, on_notice=self._on_notice, on_lost=self._on_lost)
        try:
            lease = holding.activate()
            realization = realize(lease, holding.pool)
            for note in realization.notes:
                log.info("lease %s: %s", lease.id, note)
            self.say(f"lease {lease.id} on pool {lease.pool}, RESPOOLS_ATTEMPT={lease.attempt}: running {self._shown}")
            try:
                with attempt.lock:
                    attempt.child = Child(self.argv, os.environ | realization.env, self._terminal)
                    early = holding.notice or holding.lost
            except OSError as exc:  # not found, not executable: the shell's 127 / 126
                self.say(f"cannot run {self.argv[0]}: {exc.strerror or exc}")
                returncode = NOT_FOUND if isinstance(exc, FileNotFoundError) else NOT_EXECUTABLE
            else:
                register_local_holder(lease, pid=attempt.child.process.pid, pgid=attempt.child.pgid)
                if early is not None:  # news that came before the child existed
                    self._stop_child(attempt, early)
                returncode = self._wait_child(attempt)
        finally:
            holding.stop_listening()
            if attempt.child is not None:
                attempt.child.give_back_terminal()
                attempt.child.reap_group()
            if holding.lease is not None:
                unregister_local_holder(holding.lease)
            holding.release()
        status = exit_status(returncode)
        requeued = holding.requeued_request()
        if not attempt.stopped or self._forwarded is not None or requeued is None:
            if requeued is not None:
                self.queue.requeued(requeued)
                self.queue.withdraw()  # the command finished (or was told to stop): no rerun
            else:
                self.queue.done()
            if attempt.stopped and self._forwarded is None:
                self.say(f"the command was stopped ({_describe(returncode)}); the request was not requeued")
            return status, False
        self.queue.requeued(requeued)
        pause = self.backoff.delay(requeued.attempt)
        self.say(
            f"the command was stopped ({_describe(returncode)}); request {requeued.id} requeued: "
            f"RESPOOLS_ATTEMPT={requeued.attempt} runs when it is granted again (after {pause:.1f} s)"
        )
        time.sleep(pause)
        return status, True

    def _wait_child(self, attempt: Attempt) -> int:
        child = attempt.child
        assert child is not None
        while True:
            with attempt.lock:
                kill_at = attempt.kill_at
            timeout = POLL_S if kill_at is None else max(0.0, min(POLL_S, kill_at - time.monotonic()))
            try:
                return child.process.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
            if kill_at is not None and time.monotonic() >= kill_at and not child.killed:
                self.say(f"deadline reached: SIGKILL to process group {child.pgid}")
                child.kill()

    # -- news from the heartbeat thread ------------------------------------------------------------

    def _on_notice(self, notice: type[LeaseLost]) -> None:
        self._stop_child(self._attempt, notice)

    def _on_lost(self, lost: type[LeaseLost]) -> None:
        self._stop_child(self._attempt, lost)

    def _stop_child(self, attempt: Attempt, news: type[LeaseLost]) -> None:
        """SIGTERM now, SIGKILL at the deadline (or soon, for a lease that is gone already)."""
        exc = news()
        grace = LOST_KILL_AFTER_S
        if isinstance(exc, LeasePreempted) and exc.time_left is not None:
            grace = max(0.0, exc.time_left)
        with attempt.lock:
            child = attempt.child
            if child is None:
                return  # not started yet: _one_attempt sees the news and calls this again
            kill_at = time.monotonic() + grace
            if attempt.kill_at is None or kill_at < attempt.kill_at:
                attempt.kill_at = kill_at
            if child.terminated_at is not None or child.process.poll() is not None:
                return
            attempt.stopped = True
            self.say(f"{exc}: SIGTERM to process group {child.pgid}, SIGKILL in {grace:.1f} s")
            child.terminate()

    # -- our own signals ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def _signals(self) -> Iterator[None]:
        """Forward SIGINT/SIGTERM/SIGHUP to a running child; without one, end the wait."""

        def handle(signum: int, frame: FrameType | None) -> None:
            child = self._attempt.child
            if child is not None and child.process.poll() is None:
                self._forwarded = signum
                child.signal(signum)
                return
            raise Interrupted(signum)

        previous = {signum: signal.signal(signum, handle) for signum in FORWARDED}
        try:
            yield
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


def _describe(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"ended by {name}"
    return f"exit status {returncode}"
