"""A real ZenML pipeline on the pooled Databricks orchestrator, for the tests.

``python zenml_databricks.py --url URL --token TOKEN --pool POOL --host FAKE --out OUT [--marker MARKER]``
registers the respools flavors, makes a stack of the pooled Databricks orchestrator (on the fake workspace
at ``--host``) and the default artifact store, runs ``prepare → train`` and writes a JSON summary (see
:func:`zenml_pipelines.summary`).

ZenML's Databricks orchestrator builds a wheel of this file's directory (the tests copy it alone into one)
and the fake runs each task from it (:class:`fake_databricks.Executor`). ``train`` asks for 4 GPUs, so the
run holds a 4-GPU lease; with ``--marker``, its first attempt (``RESPOOLS_ATTEMPT`` 0) writes the marker and
runs until its job is cancelled, and a later attempt returns at once.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import respools_zenml
from zenml import pipeline, step
from zenml.client import Client
from zenml.config import ResourceSettings, StepRetryConfig
from zenml.enums import StackComponentType
from zenml_pipelines import run_and_summarize

STACK = "pooled-databricks"


@step(enable_cache=False)
def prepare() -> int:
    return 3


@step(
    enable_cache=False,
    retry=StepRetryConfig(max_retries=1, delay=0),
    settings={"resources": ResourceSettings(gpu_count=4)},
)
def train(epochs: int, marker: str) -> dict[str, Any]:
    """Runs in the job's task on the fake; the lease reached it through the job cluster's environment."""
    attempt = int(os.environ["RESPOOLS_ATTEMPT"])
    seen: dict[str, Any] = {"attempt": attempt, "lease": os.environ["RESPOOLS_LEASE_ID"], "epochs": epochs}
    seen |= {"url": os.environ["RESPOOLS_URL"], "token": bool(os.environ.get("RESPOOLS_TOKEN"))}
    if marker and attempt == 0:
        Path(marker).write_text(json.dumps(seen))
        for _ in range(1200):  # until the orchestrator cancels the job at the preemption deadline
            time.sleep(0.1)
    return seen


@pipeline(enable_cache=False)
def train_pipeline(marker: str) -> None:
    train(epochs=prepare(), marker=marker)


def setup(url: str, token: str, pool: str, host: str) -> None:
    respools_zenml.register_flavors()
    client = Client()
    orchestrator: dict[str, Any] = {
        "host": host,
        "respools_url": url,
        "respools_token": token,
        "pool": pool,
        "respools_poll_s": 0.2,
    }
    client.create_stack_component(
        name="databricks-pool",
        flavor="respools_databricks",
        component_type=StackComponentType.ORCHESTRATOR,
        configuration=orchestrator,
    )
    client.create_stack(
        name=STACK,
        components={
            StackComponentType.ORCHESTRATOR: "databricks-pool",
            StackComponentType.ARTIFACT_STORE: "default",
        },
    )
    client.activate_stack(STACK)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    for option in ("--url", "--token", "--pool", "--host", "--out"):
        parser.add_argument(option, required=True)
    parser.add_argument("--marker", default="")
    args = parser.parse_args(argv)
    setup(args.url, args.token, args.pool, args.host)
    run_and_summarize(lambda: train_pipeline(marker=args.marker), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
