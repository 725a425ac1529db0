"""Which local process holds which lease: the link between a lease and the PIDs NVML reports.

The process that holds a lease (``respools run``, ``respools.lease()``) calls :func:`register_holder` when
its workload starts. That writes one small JSON file per lease into a directory the host agent reads, so the
watchdog can attribute GPU memory to leases and :meth:`LocalBackend.stop` knows which process group to
signal. A file is only believed when its owner also owns the process (or is root) and the process's start
time still matches, so a stale file never makes the agent signal a recycled PID and one user cannot point
the agent at another user's processes.

Directory: ``RESPOOLS_RUN_DIR`` if set; else ``/run/respools/holders`` if the administrator created it
(mode 1777, like ``/tmp``, so an agent running as root sees every user's leases); else the user's runtime
directory (``$XDG_RUNTIME_DIR/respools/holders``, or ``/tmp/respools-<uid>/holders``), which suits an agent
run by the same user.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import tempfile
from collections.abc import Collection, Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from respools.backends.local import procfs
from respools.backends.local.hostname import local_host_name
from respools.model import Lease, PlacementItem

log = logging.getLogger(__name__)

RUN_DIR_ENV = "RESPOOLS_RUN_DIR"
SHARED_RUN_DIR = Path("/run/respools/holders")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
ROOT_UID = 0


class Holder(BaseModel):
    """One registration: the lease, the process (group) running its workload, and its devices here."""

    model_config = ConfigDict(extra="ignore")

    lease_id: str
    pool: str
    host: str
    pid: int = Field(gt=1)
    pgid: int | None = Field(default=None, gt=1)
    start_time: int | None = None
    items: list[PlacementItem] = Field(default_factory=list)


def holders_dir(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get(RUN_DIR_ENV):
        return Path(env[RUN_DIR_ENV])
    if SHARED_RUN_DIR.is_dir():
        return SHARED_RUN_DIR
    if env.get("XDG_RUNTIME_DIR"):
        return Path(env["XDG_RUNTIME_DIR"]) / "respools" / "holders"
    return Path(tempfile.gettempdir()) / f"respools-{os.getuid()}" / "holders"


def _file(directory: Path, lease_id: str) -> Path:
    return directory / f"{_UNSAFE.sub('_', lease_id)}.json"


def register_holder(
    lease: Lease,
    *,
    pid: int | None = None,
    pgid: int | None = None,
    host: str | None = None,
    directory: Path | None = None,
) -> Path:
    """Record that process ``pid`` (default: this one) and its group run ``lease`` on this host.

    Start the workload in its own process group (``start_new_session=True``) and pass its PID, so that
    stopping the lease does not also stop the caller."""
    pid = os.getpid() if pid is None else pid
    host = local_host_name() if host is None else host
    holder = Holder(
        lease_id=lease.id,
        pool=lease.pool,
        host=host,
        pid=pid,
        pgid=pgid if pgid is not None else procfs.process_group(pid),
        start_time=procfs.start_time(pid),
        items=[item for item in lease.placement.items if item.host == host],
    )
    target_dir = directory or holders_dir()
    target_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
    target = _file(target_dir, lease.id)
    fd, tmp = tempfile.mkstemp(dir=target_dir, prefix=".holder-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(holder.model_dump_json())
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)  # atomic: a reader never sees half a file
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return target


def unregister_holder(lease_id: str, *, directory: Path | None = None) -> None:
    with contextlib.suppress(OSError):
        _file(directory or holders_dir(), lease_id).unlink()


class HolderRegistry:
    """The registrations in one directory that can be trusted now."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory or holders_dir()

    def holders(self) -> list[Holder]:
        return [holder for holder, _path in self._entries() if holder is not None]

    def get(self, lease_id: str, *, include_dead: bool = False) -> Holder | None:
        """The lease's registration; with ``include_dead`` also one whose process is gone (to confirm a
        stop, never to signal)."""
        path = _file(self.directory, lease_id)
        holder = self._load(path, include_dead)
        return holder if holder is not None and holder.lease_id == lease_id else None

    def registered(self) -> list[Holder]:
        """Every readable registration, its process alive or not (to confirm stops, never to signal)."""
        return [holder for holder, _path in self._entries(include_dead=True) if holder is not None]

    def prune(self, keep: Collection[str] = ()) -> int:
        """Remove registrations whose process is gone, except those of the leases in ``keep`` (a stop
        still to be confirmed); answers how many."""
        removed = 0
        for holder, path in self._entries(include_dead=True):
            if holder is not None and holder.lease_id in keep:
                continue
            if holder is None or not procfs.running(holder.pid):
                with contextlib.suppress(OSError):
                    path.unlink()
                    removed += 1
        return removed

    def _entries(self, include_dead: bool = False) -> list[tuple[Holder | None, Path]]:
        try:
            paths = sorted(self.directory.glob("*.json"))
        except OSError:
            return []
        return [(self._load(path, include_dead), path) for path in paths]

    def _load(self, path: Path, include_dead: bool = False) -> Holder | None:
        try:
            file_uid = path.stat().st_uid
            holder = Holder.model_validate_json(path.read_bytes())
        except (OSError, ValidationError) as exc:
            log.debug("ignoring holder file %s: %s", path, exc)
            return None
        if include_dead:
            return holder
        return holder if _trusted(holder, file_uid) else None


def _trusted(holder: Holder, file_uid: int) -> bool:
    """The process still runs, is the one that registered, and belongs to whoever wrote the file."""
    if not procfs.running(holder.pid):
        return False
    if holder.start_time is not None and procfs.start_time(holder.pid) != holder.start_time:
        return False  # the PID was recycled
    process_uid = procfs.owner_uid(holder.pid)
    if process_uid is None:
        process_uid = os.getuid()
    if file_uid not in (ROOT_UID, process_uid):
        log.warning(
            "ignoring holder file for lease %s: written by uid %d for a process of uid %d",
            holder.lease_id,
            file_uid,
            process_uid,
        )
        return False
    return True
