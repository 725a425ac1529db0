"""Hearing other replicas: a thread holds a PostgreSQL connection that ``LISTEN``s on the respools
channel and republishes each notification on this process's :class:`ChangeBus`. After (re)connecting it
publishes a resync, because notifications sent while it was away are lost."""

from __future__ import annotations

import logging
import threading

import psycopg

from respools.server.changes import CHANNEL, ORIGIN, ChangeBus, Changes, decode
from respools.server.db.engine import SHORT_KEEPALIVES, libpq_url

log = logging.getLogger(__name__)


class PgListener:
    def __init__(self, url: str, bus: ChangeBus, poll_s: float = 0.5) -> None:
        self._conninfo = libpq_url(url)
        self._bus = bus
        self._poll_s = poll_s
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.connected = threading.Event()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="respools-listener", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                with psycopg.connect(
                    self._conninfo,
                    autocommit=True,
                    application_name="respools-listener",
                    **SHORT_KEEPALIVES,
                ) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    self.connected.set()
                    self._bus.publish(Changes(resync=True))
                    while not self._stopping.is_set():
                        for notification in conn.notifies(timeout=self._poll_s):
                            origin, changes = decode(notification.payload)
                            if origin != ORIGIN:
                                self._bus.publish(changes)
            except psycopg.Error as exc:
                self.connected.clear()
                log.warning("change listener disconnected; reconnecting", extra={"error": str(exc)})
                self._stopping.wait(1.0)
        self.connected.clear()
