"""The pipeline :mod:`zenml_grant_latency` measures: ``STEPS`` pooled one-GPU steps, one after the other,
each reporting when its process was created and when its function's first line ran.

``python benchmarks/zenml_grant_latency_pipeline.py URL TOKEN POOL STEPS HOLD_S warm|cold OUT.json`` (run from
``benchmarks/``, with ``ZENML_CONFIG_PATH`` pointing at a fresh directory).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import respools_zenml
from zenml import pipeline
from zenml.client import Client
from zenml.enums import StackComponentType

import respools


@respools_zenml.step(gpu=1, enable_cache=False)
def probe(index: int, hold_s: float, before: dict[str, Any] | None = None) -> dict[str, Any]:
    first_line = time.time()
    time.sleep(hold_s)  # a step that takes a while, as real ones do (the next spare boots meanwhile)
    return {
        "index": index,
        "code": first_line,
        "spawned": psutil.Process(os.getpid()).create_time(),
        "lease_id": respools.current_lease().id,
    }


@pipeline(enable_cache=False)
def latency_pipeline(steps: int, hold_s: float) -> None:
    previous = None
    for index in range(steps):
        previous = probe(index, hold_s, previous, id=f"probe_{index}")  # one after the other


def main(url: str, token: str, pool: str, steps: int, hold_s: float, warm: bool, out: str) -> int:
    respools_zenml.register_flavors()
    client = Client()
    configuration: dict[str, Any] = {"respools_url": url, "respools_token": token, "pool": pool}
    client.create_stack_component(
        name="pooled",
        flavor="respools_local",
        component_type=StackComponentType.ORCHESTRATOR,
        configuration=configuration | {"warm_step_process": warm},
    )
    client.create_stack(
        name="pooled",
        components={StackComponentType.ORCHESTRATOR: "pooled", StackComponentType.ARTIFACT_STORE: "default"},
    )
    client.activate_stack("pooled")
    latency_pipeline(steps=steps, hold_s=hold_s)
    run = client.list_pipeline_runs(sort_by="desc:created", size=1).items[0]
    outputs = [
        client.get_run_step(step_run.id).outputs["output"][0].load()
        for step_run in client.list_run_steps(pipeline_run_id=run.id, size=100).items
    ]
    Path(out).write_text(json.dumps(outputs))
    return 0


if __name__ == "__main__":
    url, token, pool, steps, hold_s, warm, out = sys.argv[1:8]
    sys.exit(main(url, token, pool, int(steps), float(hold_s), warm == "warm", out))
