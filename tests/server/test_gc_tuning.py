"""The app factory of ``respools server`` sets the collector for serving; embedding the app does not."""

from __future__ import annotations

import asyncio
import gc
import json
import subprocess
import sys
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from respools.server.gc_tuning import collect_when_due

_PROBE = """
import gc, json, sys
from respools.server.app import app_from_env, create_app
from respools.server.settings import Settings
before = (gc.isenabled(), gc.get_freeze_count())
create_app(Settings.from_env())
embedded = (gc.isenabled(), gc.get_freeze_count())
app_from_env()
served = (gc.isenabled(), gc.get_freeze_count())
print(json.dumps({"before": before, "embedded": embedded, "served": served}))
"""


def test_the_server_factory_freezes_the_heap_and_turns_automatic_collection_off(tmp_path: Path) -> None:
    env = {"RESPOOLS_DATABASE_URL": f"sqlite:///{tmp_path / 'gc.db'}", "RESPOOLS_LOG_LEVEL": "WARNING"}
    run = subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, check=True, timeout=120
    )
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen["embedded"] == seen["before"]  # create_app alone leaves the host process's collector be
    enabled, frozen = seen["served"]
    assert not enabled, "the served process collects by itself (collect_when_due)"
    assert frozen > 50_000  # the imports and the app: what a full collection would walk again and again


class _Cycle:
    """An object in a reference cycle: garbage only a collection frees."""

    def __init__(self) -> None:
        self.me = self


def _collects(**bounds: float) -> bool:
    """Whether ``collect_when_due`` frees a cycle of garbage within a second, with automatic
    collection off (as in a served process)."""

    async def scenario() -> bool:
        garbage = _Cycle()
        gone = weakref.ref(garbage)
        del garbage
        watcher = asyncio.create_task(collect_when_due(check_s=0.01, **bounds))  # type: ignore[arg-type]
        try:
            for _ in range(100):
                await asyncio.sleep(0.01)
                if gone() is None:
                    return True
            return False
        finally:
            watcher.cancel()

    gc.collect()
    gc.disable()
    try:
        with ThreadPoolExecutor(max_workers=1) as pool:  # asyncio.run off the main thread (see test_watchers)
            return pool.submit(asyncio.run, scenario()).result(timeout=30)
    finally:
        gc.enable()


def test_a_full_collection_comes_when_allocations_grow_and_at_least_every_interval() -> None:
    assert not _collects(growth_bound=10**9, max_interval_s=3600), "nothing due: the garbage stays"
    assert _collects(growth_bound=1, max_interval_s=3600), "allocations past the bound"
    assert _collects(growth_bound=10**9, max_interval_s=0.05), "the interval passed"
