"""Where a pooled step keeps its checkpoint, so that the attempt ZenML runs after a preemption finds it.

Retries of a step run in the same pipeline run, possibly in another process or pod, so the checkpoint
lives in the stack's artifact store (local directory, S3, GCS… through ZenML's ``fileio``), under the
pipeline run and the step's name. Call these inside a step.
"""

from __future__ import annotations

import json
from typing import Any

from zenml import get_step_context
from zenml.client import Client
from zenml.io import fileio

import respools

CHECKPOINT_FOLDER = "respools-checkpoints"
STATE_FILE = "state.json"


def checkpoint_dir(scope: str | None = None) -> str:
    """The step's checkpoint directory in the artifact store (created on first use).

    ``scope`` replaces the pipeline run as the first level; give a stable name (``"train-resnet"``) for a
    checkpoint that should outlive the run, e.g. to resume in a rerun of the pipeline."""
    context = get_step_context()
    root = Client().active_stack.artifact_store.path.rstrip("/")
    path = f"{root}/{CHECKPOINT_FOLDER}/{scope or context.pipeline_run.id}/{context.step_run.name}"
    if not fileio.exists(path):
        fileio.makedirs(path)
    return path


def save_state(state: Any, scope: str | None = None) -> str:
    """Write a JSON-serializable ``state`` (epoch, step, metrics…) to the checkpoint directory; returns
    its path. Write model weights next to it with your framework, into :func:`checkpoint_dir`."""
    path = f"{checkpoint_dir(scope)}/{STATE_FILE}"
    with fileio.open(path, "w") as handle:
        handle.write(json.dumps(state))
    respools.checkpointed()  # the lease's lost work on preemption now counts from here (no-op without a lease)
    return path


def load_state(scope: str | None = None) -> Any | None:
    """The state :func:`save_state` wrote in an earlier attempt, or ``None`` on a first attempt."""
    path = f"{checkpoint_dir(scope)}/{STATE_FILE}"
    if not fileio.exists(path):
        return None
    with fileio.open(path, "r") as handle:
        return json.loads(handle.read())
