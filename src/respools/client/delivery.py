"""Raising an exception in another thread: how a preemption notice that a background thread hears reaches
the step's own code, wherever it is.

CPython's ``PyThreadState_SetAsyncExc`` makes a thread raise an exception at its next bytecode boundary.
That is the only way to interrupt arbitrary Python code without its cooperation (signals reach only the
main thread, and not at all while it runs a ``with`` block in a worker thread). Its limits, which the docs
state: a thread blocked in one long C call (``time.sleep(600)``, a socket read) gets the exception when
that call returns; use :meth:`LeaseSession.sleep` or poll ``lease.preempted`` there.

A delivery must land *inside* the lease's block, never in the cleanup after it, or it would escape the
code that expects it. So delivery is armed when the block starts and disarmed as the block ends, under
one lock: the background thread delivers only while armed, and disarming withdraws an exception that was
set but not yet raised. One window stays open, inherent to the mechanism: an exception set at the very
instant the block's last line finishes can surface as the cleanup begins, before the cleanup's first
line; the exit path therefore catches a delivered exception that lands while it disarms.
"""

from __future__ import annotations

import ctypes
import logging
import threading

log = logging.getLogger("respools.client")


def _set_async_exc(thread_id: int, exc_type: type[BaseException] | None) -> int:
    """Schedule ``exc_type`` in ``thread_id`` (``None`` withdraws a scheduled one); answers how many
    threads were affected (1, or 0 for a thread that is gone)."""
    set_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
    target = ctypes.c_ulong(thread_id)
    if exc_type is None:
        return int(set_exc(target, None))
    return int(set_exc(target, ctypes.py_object(exc_type)))


class AsyncDelivery:
    """Delivers exceptions to one thread while it is inside a block."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread_id: int | None = None
        self._armed = False
        self._scheduled: type[BaseException] | None = None

    @property
    def armed(self) -> bool:
        return self._armed

    @property
    def thread_id(self) -> int | None:
        """The thread deliveries go to (the last one armed)."""
        return self._thread_id

    def arm(self) -> None:
        """Start delivering to the calling thread."""
        with self._lock:
            self._thread_id = threading.get_ident()
            self._armed = True
            self._scheduled = None

    def deliver(self, exc_type: type[BaseException]) -> bool:
        """Raise ``exc_type`` in the armed thread; ``False`` when not armed (the block ended) or when
        called from the armed thread itself (raise it directly there)."""
        with self._lock:
            if not self._armed or self._thread_id is None or self._thread_id == threading.get_ident():
                return False
            affected = _set_async_exc(self._thread_id, exc_type)
            if affected > 1:  # cannot happen for a valid id; undo as CPython's docs ask
                _set_async_exc(self._thread_id, None)
                return False
            if affected == 1:
                self._scheduled = exc_type
            return affected == 1

    def withdraw(self) -> None:
        """Withdraw an exception set but not yet raised, staying armed (the thread is about to raise the
        same news itself). Call from the armed thread."""
        with self._lock:
            if self._scheduled is not None and self._thread_id is not None:
                _set_async_exc(self._thread_id, None)
            self._scheduled = None

    def disarm(self) -> type[BaseException] | None:
        """Stop delivering; withdraw an exception set but not yet raised. Call from the armed thread.
        Answers the exception type last delivered, raised or not (so the caller knows one was sent)."""
        with self._lock:
            self._armed = False
            scheduled, self._scheduled = self._scheduled, None
            if scheduled is not None and self._thread_id is not None:
                _set_async_exc(self._thread_id, None)
            return scheduled
