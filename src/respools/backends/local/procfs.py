"""Facts about local processes read from ``/proc``: parent, process group, owner, start time, liveness.

The watchdog attributes GPU processes to leases by ancestry and process group, and the stopper must not
signal a recycled PID, so both need more than ``os.kill(pid, 0)``. Every function answers ``None`` (or
``False``) for a process that is gone or where ``/proc`` does not exist, so callers treat "unknown" and
"gone" alike.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

PROC = Path("/proc")
# Fields of /proc/<pid>/stat after the ')' that closes the command name (which may hold spaces).
_STATE, _PPID, _PGRP, _STARTTIME = 0, 1, 2, 19


def _stat(pid: int) -> list[str] | None:
    try:
        raw = (PROC / str(pid) / "stat").read_text()
    except (OSError, ValueError):
        return None
    return raw[raw.rindex(")") + 2 :].split()


def _field(pid: int, index: int) -> int | None:
    fields = _stat(pid)
    return int(fields[index]) if fields is not None and len(fields) > index else None


def parent_pid(pid: int) -> int | None:
    return _field(pid, _PPID)


def process_group(pid: int) -> int | None:
    return _field(pid, _PGRP)


def start_time(pid: int) -> int | None:
    """Clock ticks after boot at which the process started: with the PID, a name no other process has."""
    return _field(pid, _STARTTIME)


def owner_uid(pid: int) -> int | None:
    try:
        return (PROC / str(pid)).stat().st_uid
    except OSError:
        return None


def running(pid: int) -> bool:
    """Alive and not a zombie (a zombie still answers ``kill(pid, 0)`` but holds no GPU memory)."""
    fields = _stat(pid)
    if fields is None:
        if PROC.is_dir():
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return fields[_STATE] not in ("Z", "X")


def group_members(pgid: int) -> Iterator[int]:
    """Live (non-zombie) processes of a process group."""
    if not PROC.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        except PermissionError:
            pass  # the group exists, it is just not ours
        yield pgid
        return
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None and int(fields[_PGRP]) == pgid and fields[_STATE] not in ("Z", "X"):
                yield int(entry.name)
