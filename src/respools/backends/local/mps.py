"""Whether a CUDA MPS control daemon serves this host, so fractions can get MPS compute and memory limits.

MPS limits are only honoured by clients of a running daemon; setting them without one does nothing, and
telling a user their fraction is compute-limited when it is not would be a lie. The daemon announces
itself through its pipe directory (``CUDA_MPS_PIPE_DIRECTORY``, default ``/tmp/nvidia-mps``): a ``control``
FIFO, and on recent drivers a ``nvidia-cuda-mps-control.pid`` file that also lets us tell a live daemon from
the FIFO a killed one left behind.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

PIPE_DIR_ENV = "CUDA_MPS_PIPE_DIRECTORY"
DEFAULT_PIPE_DIR = Path("/tmp/nvidia-mps")
CONTROL_PIPE = "control"
PID_FILE = "nvidia-cuda-mps-control.pid"


@dataclass(frozen=True)
class MpsState:
    running: bool
    pipe_dir: Path

    @property
    def custom_pipe_dir(self) -> bool:
        """Clients must be told a non-default pipe directory, or they never find the daemon."""
        return self.pipe_dir != DEFAULT_PIPE_DIR


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else (the daemon usually runs as root)
    return True


def _is_fifo(path: Path) -> bool:
    try:
        return stat.S_ISFIFO(path.stat().st_mode)
    except OSError:
        return False


def probe_mps(environ: Mapping[str, str] | None = None) -> MpsState:
    env = os.environ if environ is None else environ
    pipe_dir = Path(env.get(PIPE_DIR_ENV) or DEFAULT_PIPE_DIR)
    if not _is_fifo(pipe_dir / CONTROL_PIPE):
        return MpsState(running=False, pipe_dir=pipe_dir)
    try:
        pid = int((pipe_dir / PID_FILE).read_text().strip())
    except (OSError, ValueError):
        return MpsState(running=True, pipe_dir=pipe_dir)  # older daemons write no pid file
    return MpsState(running=_pid_alive(pid), pipe_dir=pipe_dir)
