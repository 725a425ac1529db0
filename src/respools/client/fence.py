"""Fencing a ``respools.lease()`` holder at its preemption deadline (DESIGN §2.8).

The service keeps an overdue lease's GPUs until the holder releases it, so a block that ignores its
notice must end itself: this process is the workload. The release is reported by a small reporter
process (:mod:`respools.client.fence_reporter`) that waits until this process is gone — releasing first
and exiting second would hand the GPUs over while this process still holds their memory. Where the
reporter cannot be started, the release is sent from here just before the exit, the lesser evil than a
lease that stays overdue until its TTL.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
from pathlib import Path

from respools.client.api import Client

log = logging.getLogger("respools.client")

FENCED_EXIT_STATUS = 128 + 9
"""Exit status of a process that fenced itself at a preemption deadline: a SIGKILL's, as if stopped."""
REPORTER = Path(__file__).with_name("fence_reporter.py")


def start_reporter(client: Client, lease_id: str) -> bool:
    """Start the process that releases ``lease_id`` once this one is gone; False if it could not start."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "RESPOOLS_FENCE_PID": str(os.getpid()),
        "RESPOOLS_FENCE_LEASE": lease_id,
        "RESPOOLS_FENCE_URLS": ",".join(client.config.urls),
        "RESPOOLS_FENCE_TOKEN": client.config.token or "",
    }
    try:
        subprocess.Popen(
            [sys.executable, "-I", str(REPORTER)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # outlives us, and no signal to our group reaches it
            close_fds=True,
        )
    except OSError as exc:
        log.error("lease %s: cannot start the release reporter (%s); releasing before exiting", lease_id, exc)
        return False
    return True


def end_process() -> None:
    """End this process now: no ``finally`` blocks, no atexit (the step's own cleanup could block on the
    GPU the next holder is about to get); logs and standard streams are flushed first."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(FENCED_EXIT_STATUS)
