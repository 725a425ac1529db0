"""The reconciler thread: wins or waits for leadership, then runs a cycle whenever something changed
and at least every ``tick_s`` (deadlines: lease expiry, preemption grace, reservation windows, host
reports)."""

from __future__ import annotations

import logging
import threading
import time
from enum import StrEnum

from respools.scheduling import Memory
from respools.server.backends import WorkloadStopper
from respools.server.changes import Changes
from respools.server.db.database import Database
from respools.server.definitions import DEFINITIONS_TOPIC, DefinitionsCache
from respools.server.metrics import Metrics
from respools.server.reconciler.apply import CycleOutcome
from respools.server.reconciler.cycle import CycleTimings, run_cycle
from respools.server.reconciler.leadership import (
    Leadership,
    LostLeadership,
    PostgresLeadership,
    SqliteLeadership,
)
from respools.server.reconciler.live_leases import LiveLeases
from respools.server.reconciler.statistics import EarlyStatistics
from respools.server.settings import Settings

log = logging.getLogger(__name__)

MIN_CYCLE_INTERVAL_S = 0.005
"""Cycles start at most this often. When changes are rare a cycle starts the moment one arrives; under
load, changes that arrive during a cycle wait for the next one, which then decides them all at once
instead of paying a snapshot per change."""


class Role(StrEnum):
    LEADER = "leader"
    FOLLOWER = "follower"
    DISABLED = "disabled"
    STOPPED = "stopped"


class Reconciler:
    def __init__(
        self,
        db: Database,
        cache: DefinitionsCache,
        settings: Settings,
        metrics: Metrics,
        stopper: WorkloadStopper | None = None,
    ) -> None:
        self._db = db
        self._cache = cache
        self._memory = Memory()
        """Kept for the process's life: ids are never reused and what they name never changes, so
        what the core derived from them stays true whoever leads."""
        self._live = LiveLeases()
        """Also kept for the process's life: each cycle reads what changed of the live leases."""
        self._settings = settings
        self._metrics = metrics
        self._stopper = stopper
        self._leadership: Leadership = PostgresLeadership(db) if db.is_postgres else SqliteLeadership(db)
        self._statistics = EarlyStatistics(db)
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.role = Role.DISABLED if not settings.run_reconciler else Role.FOLLOWER
        self.last_cycle_at: float | None = None
        self.last_cycle_started: float | None = None
        self.cycles = 0

    # -- control ------------------------------------------------------------------------------------

    def on_changes(self, changes: Changes) -> None:
        if changes.wake or changes.resync or DEFINITIONS_TOPIC in changes.config:
            self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    def start(self) -> None:
        if not self._settings.run_reconciler or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="respools-reconciler", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self._leadership.release()
        if isinstance(self._leadership, PostgresLeadership):
            self._leadership.dispose()
        self.role = Role.STOPPED

    def healthy(self) -> bool:
        """False when leading but no cycle completed lately (a stuck loop or a failing database)."""
        if self.role != Role.LEADER:
            return self.role != Role.STOPPED
        stale_after = max(10.0, 5 * self._settings.tick_s)
        return self.last_cycle_at is not None and time.monotonic() - self.last_cycle_at < stale_after

    # -- the loop -----------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stopping.is_set():
            if not self._lead():
                continue
            self._wake.wait(self._settings.tick_s)
            if self._stopping.is_set():
                break
            if self.last_cycle_started is not None:
                time.sleep(max(0.0, self.last_cycle_started + MIN_CYCLE_INTERVAL_S - time.monotonic()))
            self._wake.clear()
            self.last_cycle_started = time.monotonic()
            self.run_once()

    def _lead(self) -> bool:
        """Ensure leadership; waits an election interval and answers False when another replica leads."""
        if self._leadership.is_leader:
            if self.role != Role.LEADER:
                self.role = Role.LEADER
                self._metrics.leader.set(1)
            return True
        try:
            acquired = self._leadership.try_acquire()
        except Exception as exc:
            log.warning("leader election failed", extra={"error": str(exc)})
            acquired = False
        if acquired:
            self.role = Role.LEADER
            self._metrics.leader.set(1)
            log.info("this replica now leads the reconciler")
            self._wake.set()
            return True
        self.role = Role.FOLLOWER
        self._metrics.leader.set(0)
        self._stopping.wait(self._settings.election_interval_s)
        return False

    def run_once(self, timings: CycleTimings | None = None) -> CycleOutcome | None:
        """Run one cycle now (the loop's body; tests and benchmarks call it directly, the latter with
        ``timings`` to read where the cycle's time went)."""
        timings = timings if timings is not None else CycleTimings()
        started = time.perf_counter()
        try:
            outcome = self._leadership.run(lambda tx: run_cycle(tx, self._cache, timings, self._memory, self._live))
        except LostLeadership as exc:
            self.role = Role.FOLLOWER
            self._metrics.leader.set(0)
            log.warning("lost the reconciler leadership", extra={"error": str(exc)})
            return None
        except Exception:
            self._metrics.cycle_failures.inc()
            log.exception("reconciler cycle failed; retrying on the next tick")
            self._stopping.wait(min(1.0, self._settings.tick_s))
            return None
        self.cycles += 1
        self.last_cycle_at = time.monotonic()
        self._metrics.observe_cycle(outcome, time.perf_counter() - started, timings)
        self._statistics.after_cycle(len(outcome.grants))
        for lease, pool in outcome.overdue + outcome.revoked:
            if self._stopper is not None and pool is not None:
                self._stopper.stop(lease, pool)
        if outcome.decided:
            log.debug(
                "cycle",
                extra={
                    "granted": len(outcome.grants),
                    "rejected": outcome.rejected,
                    "preempted": len(outcome.preempted),
                    "expired": outcome.expired,
                    "revoked": len(outcome.revoked),
                    "overdue": len(outcome.overdue),
                    "waiting": outcome.waiting,
                },
            )
        return outcome
