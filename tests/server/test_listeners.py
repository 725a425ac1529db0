"""Several workers listen on sockets of their own (``SO_REUSEPORT``), so the kernel spreads connections
over them: a burst of keep-alive clients no longer lands on whichever worker was awake."""

from __future__ import annotations

import json
import pickle
import select
import socket
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
import uvicorn

from respools.server.listeners import SocketPerWorker, run_workers, spreads_connections
from respools.server.process import ServerProcess, free_port
from tests.server import pg
from tests.server.servers import TEST_SETTINGS

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="SO_REUSEPORT spreads connections on Linux only")

CONNECTIONS = 32


def config(*, host: str = "127.0.0.1", port: int = 8000, workers: int = 2, uds: str | None = None) -> uvicorn.Config:
    return uvicorn.Config(
        "respools.server.app:app_from_env", factory=True, host=host, port=port, workers=workers, uds=uds
    )


def test_several_workers_on_a_tcp_port_get_a_socket_each() -> None:
    assert spreads_connections(config(port=8000, workers=2))
    assert not spreads_connections(config(port=8000, workers=1))
    assert not spreads_connections(config(port=0, workers=2))  # each worker would pick a port of its own
    assert not spreads_connections(config(uds="/tmp/respools.sock", workers=2))


def test_each_process_that_unpickles_the_list_binds_its_own_socket_and_the_kernel_spreads_connections() -> None:
    port = free_port()
    recipe = SocketPerWorker("127.0.0.1", port)
    assert recipe == []  # the supervisor holds no socket that nobody would accept on
    with ExitStack() as stack:
        listeners = []
        for _ in range(2):
            (sock,) = pickle.loads(pickle.dumps(recipe))
            stack.callback(sock.close)
            assert sock.getsockname() == ("127.0.0.1", port)
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) == 1
            sock.listen(CONNECTIONS)
            listeners.append(sock)
        for _ in range(CONNECTIONS):
            stack.enter_context(socket.create_connection(("127.0.0.1", port)))
        accepted = Counter[int]()
        while sum(accepted.values()) < CONNECTIONS:
            ready, _, _ = select.select(listeners, [], [], 5)
            assert ready, f"only {sum(accepted.values())} of {CONNECTIONS} connections arrived"
            for sock in ready:
                stack.enter_context(sock.accept()[0])
                accepted[listeners.index(sock)] += 1
    assert min(accepted[0], accepted[1]) >= CONNECTIONS // 8, accepted


def test_a_port_in_use_fails_at_once_in_the_supervisor() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(SystemExit) as exited:
            run_workers(config(host="127.0.0.1", port=port, workers=2))
    assert exited.value.code == uvicorn.config.STARTUP_FAILURE


@pytest.fixture
def two_workers(tmp_path: Path) -> Iterator[ServerProcess]:
    reason = pg.unreachable_reason()
    if reason:
        pytest.skip(reason)
    with pg.scratch_database("respools_test_listeners") as url:
        server = ServerProcess(url, "rp_listeners_admin", tmp_path / "server.log", workers=2, env=TEST_SETTINGS)
        server.start()
        try:
            wait_for_both_workers(server)
            yield server
        finally:
            server.stop()


def wait_for_both_workers(server: ServerProcess, timeout: float = 30.0) -> None:
    """``start`` returns when one worker answers; the other may still be starting (and not listening)."""
    deadline = time.monotonic() + timeout
    seen: set[str] = set()
    while seen != {"leader", "follower"}:
        assert time.monotonic() < deadline, f"only {seen} answered within {timeout:.0f} s:\n{server.log_tail()}"
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            seen.add(readyz_role(sock))


def readyz_role(sock: socket.socket) -> str:
    """The reconciler role of the worker that accepted ``sock`` (one leads, the other follows)."""
    sock.sendall(b"GET /readyz HTTP/1.1\r\nHost: respools\r\nConnection: close\r\n\r\n")
    response = b""
    while chunk := sock.recv(65536):
        response += chunk
    role: str = json.loads(response.partition(b"\r\n\r\n")[2])["reconciler"]
    return role


@pytest.mark.postgres
def test_a_burst_of_connections_reaches_both_workers(two_workers: ServerProcess) -> None:
    """All connections are open before any is used, as a pool of keep-alive clients opens them: with
    one shared socket the worker awake at that moment could take them all."""
    with ExitStack() as stack:
        burst = [
            stack.enter_context(socket.create_connection(("127.0.0.1", two_workers.port), timeout=10))
            for _ in range(CONNECTIONS)
        ]
        roles = Counter(readyz_role(sock) for sock in burst)
    assert set(roles) == {"leader", "follower"}, roles
    assert min(roles.values()) >= CONNECTIONS // 8, roles
