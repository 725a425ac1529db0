"""Whose CPU a benchmark's load used: the server under test, PostgreSQL, the load generator itself.

On a shared 2-core VM, lifecycles/s swing with the neighbours, and a run that falls short does not say
why. The CPU each party spent per lifecycle does: it moves far less than the wall-clock figure, it shows
which party grew when a change made things slower, and ``cores / total`` is the most lifecycles/s the
machine could give with every core busy on this load (more clients cannot beat it; less CPU can).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psutil


def _cpu_s(processes: Iterable[psutil.Process]) -> float:
    """CPU seconds used so far by ``processes``, user and system, skipping any that ended meanwhile."""
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def tree_cpu_s(pid: int) -> float:
    """CPU seconds used so far by process ``pid`` and its living descendants (a server's workers)."""
    root = psutil.Process(pid)
    return _cpu_s((root, *root.children(recursive=True)))


def postgres_cpu_s() -> float:
    """CPU seconds used so far by the processes of the ``postgres`` user (the local server's)."""
    return _cpu_s(p for p in psutil.process_iter(["username"]) if p.info["username"] == "postgres")


@dataclass
class CpuUse:
    """CPU seconds per party over one measured stretch, and how busy the whole machine was."""

    server_s: float = 0.0
    database_s: float | None = None
    client_s: float = 0.0
    wall_s: float = 0.0
    machine_busy: float = 0.0
    """Share of all cores busy over the stretch, whoever used them (1.0: every core, all the time)."""

    def per(self, count: int) -> dict[str, float | None]:
        """Milliseconds per unit of work (``count`` lifecycles), and the all-cores-busy ceiling."""
        if count == 0:
            return {"server_cpu_ms": None, "database_cpu_ms": None, "client_cpu_ms": None, "cpu_ceiling_per_s": None}
        spent = self.server_s + (self.database_s or 0.0) + self.client_s
        return {
            "server_cpu_ms": 1000 * self.server_s / count,
            "database_cpu_ms": None if self.database_s is None else 1000 * self.database_s / count,
            "client_cpu_ms": 1000 * self.client_s / count,
            "cpu_ceiling_per_s": (os.cpu_count() or 1) * count / spent if spent else None,
        }


@contextmanager
def cpu_use(server_pid: int, *, database: bool) -> Iterator[CpuUse]:
    """Measure the stretch inside the ``with``: the server's process tree, PostgreSQL's processes when
    ``database``, and this process."""
    use = CpuUse()
    psutil.cpu_percent()  # starts the machine-wide interval
    server, client, wall = tree_cpu_s(server_pid), time.process_time(), time.perf_counter()
    database_before = postgres_cpu_s() if database else None
    try:
        yield use
    finally:
        use.server_s = tree_cpu_s(server_pid) - server
        use.client_s = time.process_time() - client  # every thread of this process
        use.wall_s = time.perf_counter() - wall
        if database_before is not None:
            use.database_s = postgres_cpu_s() - database_before
        use.machine_busy = psutil.cpu_percent() / 100
