"""Lending the terminal to the command that ``respools run`` starts.

The command runs in a process group of its own (so preemption can signal all of it), but a process group
that is not the terminal's foreground group is stopped by SIGTTIN when it reads the terminal: a
``breakpoint()`` in a training script would hang. So, when ``respools run`` itself owns the terminal's
foreground, it hands the foreground to the command's group for the run and takes it back after, as a
shell does for a job. Ctrl-C typed at the terminal then reaches the command directly.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys


class TerminalLoan:
    """The terminal's foreground, lent to one process group; a no-op without a terminal we own."""

    def __init__(self) -> None:
        self._fd: int | None = None
        try:
            fd = sys.stdin.fileno()
            if os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp():
                self._fd = fd
        except (OSError, ValueError, AttributeError):  # no stdin, a closed one, or a replaced sys.stdin
            self._fd = None

    @property
    def active(self) -> bool:
        return self._fd is not None

    def lend(self, pgid: int) -> None:
        """Make ``pgid`` the foreground group; wake it in case it read the terminal too early."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.tcsetpgrp(self._fd, pgid)
            os.killpg(pgid, signal.SIGCONT)

    def take_back(self) -> None:
        """Foreground to us again. We are a background group by now, and a background group that sets
        the foreground gets SIGTTOU, so that signal is ignored for the call."""
        if self._fd is None:
            return
        previous = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
        try:
            with contextlib.suppress(OSError):
                os.tcsetpgrp(self._fd, os.getpgrp())
        finally:
            signal.signal(signal.SIGTTOU, previous)
