"""A ZenML training pipeline whose GPU steps run on respools pools: what a data scientist writes.

Nothing here knows where the GPUs are. ``train`` asks for one GPU with :func:`respools_zenml.step` and may
borrow idle capacity (``preemptible=True``); if it is preempted it saves a checkpoint and lets the notice
fail the step, ZenML retries it (``max_retries=2``) once the request is granted again at its original place
in the queue, and the retry resumes from the checkpoint. ``evaluate`` is a plain ``zenml.step`` with
ZenML's own ``ResourceSettings``: the pooled orchestrator leases a GPU for it too.
"""

from __future__ import annotations

import time

import respools_zenml
from zenml import pipeline, step
from zenml.config import ResourceSettings

import respools

EPOCHS = 30
SECONDS_PER_EPOCH = 0.2


@step
def prepare_data() -> list[float]:
    """No resources declared: runs without a lease, like on any orchestrator."""
    return [float(i) for i in range(100)]


@respools_zenml.step(gpu=1, preemptible=True, max_retries=2)
def train(data: list[float]) -> dict[str, float]:
    lease = respools.current_lease()
    state = respools_zenml.load_state() or {"epoch": 0, "weight": 0.0}
    if lease.attempt:
        print(f"attempt {lease.attempt + 1}: resuming at epoch {state['epoch']} (lease {lease.id})")
    try:
        while state["epoch"] < EPOCHS:
            time.sleep(SECONDS_PER_EPOCH)  # one epoch of "training" on lease.env["CUDA_VISIBLE_DEVICES"]
            state["weight"] += sum(data) / len(data) / EPOCHS
            state["epoch"] += 1
    except respools.LeasePreempted as notice:
        respools_zenml.save_state(state)
        print(f"preempted at epoch {state['epoch']} ({notice.reason}); checkpoint saved, {notice.time_left:.0f} s left")
        raise  # fail the step: ZenML retries it when respools grants the request again
    return {"weight": state["weight"], "epochs": state["epoch"], "attempts": lease.attempt + 1}


@step(settings={"resources": ResourceSettings(gpu_count=1, memory="2GiB")})
def evaluate(model: dict[str, float]) -> float:
    """A plain zenml.step: its ResourceSettings are leased by the pooled orchestrator as well."""
    return round(model["weight"], 3)


@pipeline(enable_cache=False)
def training_pipeline() -> None:
    evaluate(train(prepare_data()))
