"""The app factory of ``respools server`` sets the collector for serving; embedding the app does not."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from respools.server.gc_tuning import YOUNG_THRESHOLD

_PROBE = """
import gc, json, sys
from respools.server.app import app_from_env, create_app
from respools.server.settings import Settings
before = (gc.get_threshold()[0], gc.get_freeze_count())
create_app(Settings.from_env())
embedded = (gc.get_threshold()[0], gc.get_freeze_count())
app_from_env()
served = (gc.get_threshold()[0], gc.get_freeze_count())
print(json.dumps({"before": before, "embedded": embedded, "served": served}))
"""


def test_the_server_factory_freezes_the_heap_and_raises_the_young_threshold(tmp_path: Path) -> None:
    env = {"RESPOOLS_DATABASE_URL": f"sqlite:///{tmp_path / 'gc.db'}", "RESPOOLS_LOG_LEVEL": "WARNING"}
    run = subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, check=True, timeout=120
    )
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen["embedded"] == seen["before"]  # create_app alone leaves the host process's collector be
    threshold, frozen = seen["served"]
    assert threshold == YOUNG_THRESHOLD
    assert frozen > 50_000  # the imports and the app: what a full collection would walk again and again
