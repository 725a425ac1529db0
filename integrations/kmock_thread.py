"""kmock served from a background thread, for tests whose code under test is synchronous.

The official clients (``kubernetes``, ``google-cloud-aiplatform`` over REST, ``databricks-sdk``) block on
HTTP, so the fake they talk to cannot share the test's thread: each fixture runs kmock's server on its own
event loop in a daemon thread, on a free loopback port, and stops it when the test ends. Importable from
every integration's tests because pytest puts this folder on ``sys.path`` for ``integrations/conftest.py``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import TypeVar

import kmock

Handler = TypeVar("Handler", bound=kmock.RawHandler)


def _as_it_is(handler: kmock.RawHandler) -> None:
    """No routes beyond what the handler serves by itself."""


def serve_in_thread(make: Callable[[], Handler], configure: Callable[[Handler], None] = _as_it_is) -> Iterator[Handler]:
    """Yield a started handler made by ``make`` (inside the server's loop) and set up by ``configure``; for
    ``yield from`` in a fixture."""
    loop = asyncio.new_event_loop()
    started: Future[tuple[Handler, asyncio.Event]] = Future()

    async def serve() -> None:
        stopping = asyncio.Event()
        async with make() as handler, kmock.Server(handler):
            configure(handler)
            started.set_result((handler, stopping))
            await stopping.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    handler, stopping = started.result(timeout=10)
    yield handler
    loop.call_soon_threadsafe(stopping.set)
    thread.join(timeout=10)
    loop.close()
