"""Where several worker processes listen: each on a socket of its own, in one ``SO_REUSEPORT`` group.

uvicorn's ``--workers`` binds one socket in the supervisor and hands it to every worker, so all share
one accept queue, and whichever worker is awake when connections arrive takes them. Clients keep their
connections alive, so a burst of them at start-up stays where it landed: measured with 32 clients and
two workers, one worker often held nearly all of them (87% of a core against 3%) while the other idled,
and those runs did about three quarters of the lifecycles of the others. With a socket per worker in a
``SO_REUSEPORT`` group, Linux spreads connections over the workers by a hash of their addresses,
whoever is awake.

The sockets are handed to uvicorn's own supervisor (which starts, watches and restarts the workers) as a
list that pickles as the recipe rather than as a socket: each worker, started or restarted, unpickles
it into a socket it binds itself. The supervisor holds none, so no connection waits in a queue that
nobody accepts from.

Only on Linux: elsewhere ``SO_REUSEPORT`` lets sockets share a port without spreading connections, and
uvicorn's shared socket is the better choice. As with any ``SO_REUSEPORT`` listener, a second server
started on the same port by the same user joins the group instead of failing."""

from __future__ import annotations

import logging
import socket
import sys
from typing import Any

import uvicorn
from uvicorn.supervisors import Multiprocess

log = logging.getLogger(__name__)


def spreads_connections(config: uvicorn.Config) -> bool:
    """Whether :func:`run_workers` applies: several workers on a TCP port this host spreads over sockets."""
    return (
        config.workers > 1
        and sys.platform == "linux"
        and hasattr(socket, "SO_REUSEPORT")
        and config.uds is None
        and config.fd is None
        and config.port != 0  # each worker would get a port of its own
    )


def bind_reuse_port(host: str, port: int) -> socket.socket:
    """A listening-ready TCP socket on ``host:port`` in the port's ``SO_REUSEPORT`` group."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


def _bound_in_worker(host: str, port: int) -> list[socket.socket]:
    return [bind_reuse_port(host, port)]


class SocketPerWorker(list[socket.socket]):
    """Empty where it is made; in each process that unpickles it, a list of one socket bound there."""

    def __init__(self, host: str, port: int) -> None:
        super().__init__()
        self.host, self.port = host, port

    def __reduce__(self) -> tuple[Any, ...]:
        return _bound_in_worker, (self.host, self.port)


def run_workers(config: uvicorn.Config) -> None:
    """Run ``config.workers`` workers under uvicorn's supervisor, each listening on a socket of its own.

    The address is tried here first, so that a port in use fails the command at once rather than every
    worker, one after another."""
    try:
        bind_reuse_port(config.host, config.port).close()
    except OSError as exc:
        log.error("cannot listen on %s:%d: %s", config.host, config.port, exc)
        sys.exit(uvicorn.config.STARTUP_FAILURE)
    log.info(
        "listening on http://%s:%d with %d workers, a socket each",
        config.host,
        config.port,
        config.workers,
        extra={"host": config.host, "port": config.port, "workers": config.workers},
    )
    Multiprocess(config, sockets=SocketPerWorker(config.host, config.port)).run()
