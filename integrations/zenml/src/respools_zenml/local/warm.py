"""A step process started ahead of its grant, so that a granted step does not wait for Python to import
ZenML.

Most of the time between a grant and the step's first line is the step process starting: the interpreter,
ZenML's imports and integrations, opening the store. None of it depends on which step runs, so the pooled
local orchestrator keeps one such process ready per pipeline run (``step_process --warm``), blocked on
its standard input; at the grant it writes the step and the lease's arguments there, and starts the next
spare while the step runs. A spare holds no lease, no GPU and none of the user's modules (those are
imported when the step's source is loaded, after the grant); one idle interpreter is its whole cost.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import threading
from collections.abc import Mapping

log = logging.getLogger(__name__)


class WarmSpare:
    """At most one step process waiting for a step; :meth:`take` hands it one and starts the next."""

    def __init__(self, argv: list[str], env: Mapping[str, str]) -> None:
        self._argv = argv
        self._env = dict(env)
        self._lock = threading.Lock()
        self._spare: subprocess.Popen[bytes] | None = None
        self._closed = False

    def prepare(self) -> None:
        """Have a spare booting or ready (call before waiting for a grant, so the two overlap)."""
        with self._lock:
            if self._closed or (self._spare is not None and self._spare.poll() is None):
                return
            try:
                self._spare = subprocess.Popen(self._argv, env=self._env, stdin=subprocess.PIPE, start_new_session=True)
            except OSError as exc:
                log.debug("respools: no warm step process (%s); steps start cold", exc)
                self._spare = None

    def take(self, order: Mapping[str, object]) -> subprocess.Popen[bytes] | None:
        """The spare, now running the step in ``order``; ``None`` when there was none alive (start cold)."""
        with self._lock:
            spare, self._spare = self._spare, None
        if spare is None or spare.poll() is not None or spare.stdin is None:
            return None
        try:
            spare.stdin.write(json.dumps(order).encode() + b"\n")
            spare.stdin.close()
        except OSError:  # it died between the check and the write
            _kill(spare)
            return None
        self.prepare()  # the next step's, booting while this one runs
        return spare

    def close(self) -> None:
        """End the spare at the end of the run (it is waiting on its input and holds nothing)."""
        with self._lock:
            spare, self._spare, self._closed = self._spare, None, True
        if spare is not None:
            _kill(spare)


def _kill(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        process.wait(5)
