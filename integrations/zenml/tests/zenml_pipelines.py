"""Real ZenML pipelines for the tests, run in a subprocess per pipeline run (each with its own ZenML store).

``python zenml_pipelines.py SCENARIO --url URL --token TOKEN --pool POOL --out SUMMARY.json [options]``
registers the respools flavors, makes a stack of the pooled local orchestrator and the default artifact
store, runs the scenario's pipeline and writes a JSON summary of the run (step runs, their statuses,
respools metadata and outputs) for the test to check. With ``--go FILE`` it waits for FILE to exist after
the set-up, so a test can start a pipeline at a precise moment without paying ZenML's start-up then.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import respools_zenml
from zenml import pipeline, step
from zenml.client import Client
from zenml.config import ResourceSettings
from zenml.enums import StackComponentType

import respools

ORCHESTRATOR = "pooled"
STACK = "pooled"


@step(enable_cache=False)
def prepare() -> int:
    """Runs without a lease: it declares no resources."""
    return 3


@step(enable_cache=False, settings={"resources": ResourceSettings(gpu_count=1)})
def gpu_step(x: int) -> dict[str, Any]:
    """A plain zenml.step with ResourceSettings: the pooled orchestrator leases a GPU for it."""
    lease = respools.current_lease()
    return {"started": time.time(), "lease_id": lease.id, "x": x}


@pipeline(enable_cache=False)
def waiting_pipeline() -> None:
    gpu_step(prepare())


@respools_zenml.step(gpu=1, preemptible=True, priority=0, max_retries=1, enable_cache=False)
def train(iterations: int, marker: str) -> dict[str, Any]:
    """Trains in small increments; on preemption it saves how far it got and lets the notice fail the step,
    so that ZenML retries it once the request is granted again, and the retry resumes from there."""
    lease = respools.current_lease()
    state = respools_zenml.load_state() or {"done": 0}
    resumed_from = state["done"]
    try:
        while state["done"] < iterations:
            # The marker says how far this attempt got, so a test preempts only once there is work to save.
            Path(marker).write_text(json.dumps({"attempt": lease.attempt, "lease": lease.id, "done": state["done"]}))
            time.sleep(0.1)  # a plain sleep: the notice arrives as an asynchronous exception
            state["done"] += 1
    except respools.LeasePreempted as notice:
        respools_zenml.save_state(state)
        print(f"preempted after {state['done']} iterations ({notice.reason}); checkpoint saved", flush=True)
        raise
    return {"done": state["done"], "resumed_from": resumed_from, "attempt": lease.attempt}


@pipeline(enable_cache=False)
def train_pipeline(iterations: int, marker: str) -> None:
    train(iterations=iterations, marker=marker)


@respools_zenml.step(gpu=1, priority=10, enable_cache=False)
def urgent() -> dict[str, Any]:
    """Higher request priority than ``train``, same subject: it preempts ``train``."""
    lease = respools.current_lease()
    time.sleep(0.5)
    return {"lease_id": lease.id, "finished": time.time()}


@pipeline(enable_cache=False)
def urgent_pipeline() -> None:
    urgent()


@pipeline(enable_cache=False)
def too_big_pipeline() -> None:
    gpu_step.with_options(settings={"resources": ResourceSettings(gpu_count=2)})(prepare())


@respools_zenml.step(gpu=1, enable_cache=False)
def stubborn(marker: str) -> None:
    """Ignores its preemption notice: the orchestrator must stop it at the deadline."""
    Path(marker).write_text(json.dumps({"lease": respools.current_lease().id}))
    try:
        # Short sleeps: the notice is raised between bytecodes, and one long C call would hold it back
        # until it returns (client/delivery.py), past the deadline on a slow machine.
        for _ in range(1200):
            time.sleep(0.1)
    except respools.LeasePreempted:
        print("ignoring the preemption notice", flush=True)
        time.sleep(120)


@pipeline(enable_cache=False)
def stubborn_pipeline(marker: str) -> None:
    stubborn(marker=marker)


@respools_zenml.step(gpu=1, max_retries=1, enable_cache=False)
def flaky(marker: str) -> str:
    """Fails its first attempt with an ordinary error (no preemption); ZenML's retry succeeds."""
    lease_id = respools.current_lease().id
    if not Path(marker).exists():
        Path(marker).write_text(lease_id)
        raise ValueError("transient failure")
    return lease_id


@pipeline(enable_cache=False)
def flaky_pipeline(marker: str) -> None:
    flaky(marker=marker)


@respools_zenml.step(gpu=1)
def featurize(x: int) -> int:
    """Cacheable: the second run with the same input is served from ZenML's cache, without a lease."""
    return x * 2


@pipeline
def cached_pipeline() -> None:
    featurize(prepare())


@step(
    enable_cache=False,
    settings={"resources": ResourceSettings(gpu_count=1, allocation_wait_timeout_seconds=2)},
)
def impatient() -> None:
    """Waits at most 2 s for its GPU: with the pool busy, the step fails and its request is cancelled."""


@pipeline(enable_cache=False)
def impatient_pipeline() -> None:
    impatient()


@step(enable_cache=False, settings={"resources": ResourceSettings(gpu_count=1, reclaim_tolerance="none")})
def steadfast(marker: str, go: str) -> dict[str, Any]:
    """Not reclaimable: a higher-priority request of its own subject must wait until it ends."""
    lease = respools.current_lease()
    Path(marker).write_text(json.dumps({"lease": lease.id}))
    while not Path(go).exists():
        time.sleep(0.1)
    return {"lease_id": lease.id, "preemptible": lease.lease.preemptible, "finished": time.time()}


@pipeline(enable_cache=False)
def steadfast_pipeline(marker: str, go: str) -> None:
    steadfast(marker=marker, go=go)


@respools_zenml.step(gpu=1, preemptible=True, max_retries=1, enable_cache=False)
def worker(name: str, marker_dir: str, iterations: int) -> dict[str, Any]:
    """One of two concurrent steps of a dynamic pipeline; checkpoints on preemption, resumes on the retry."""
    lease = respools.current_lease()
    state = respools_zenml.load_state() or {"done": 0}
    resumed_from = state["done"]
    marker = Path(marker_dir) / f"{name}-{lease.attempt}.json"
    try:
        while state["done"] < iterations:
            marker.write_text(json.dumps({"lease": lease.id, "done": state["done"]}))
            time.sleep(0.1)
            state["done"] += 1
    except respools.LeasePreempted:
        respools_zenml.save_state(state)
        raise
    return {"done": state["done"], "resumed_from": resumed_from, "attempt": lease.attempt, "lease_id": lease.id}


@pipeline(dynamic=True, enable_cache=False)
def dynamic_pipeline(marker_dir: str, iterations: int) -> None:
    first = worker.submit("a", marker_dir, iterations, id="worker_a")
    second = worker.submit("b", marker_dir, iterations, id="worker_b")
    first.result()
    second.result()


def setup(url: str, token: str, pool: str) -> None:
    respools_zenml.register_flavors()
    client = Client()
    client.create_stack_component(
        name=ORCHESTRATOR,
        flavor="respools_local",
        component_type=StackComponentType.ORCHESTRATOR,
        configuration={"respools_url": url, "respools_token": token, "pool": pool},
    )
    client.create_stack(
        name=STACK,
        components={StackComponentType.ORCHESTRATOR: ORCHESTRATOR, StackComponentType.ARTIFACT_STORE: "default"},
    )
    client.activate_stack(STACK)


def run_and_summarize(run: Callable[[], object], out: str) -> int:
    """Run the pipeline(s) and write the summary of the latest run to ``out``; how it ended (an exception
    included) is for the test to judge, so the script itself exits 0."""
    error: str | None = None
    try:
        run()
    except Exception as exc:  # the summary says how the run ended; the test decides
        error = f"{type(exc).__name__}: {exc}"
    runs = Client().list_pipeline_runs(sort_by="desc:created", size=1).items
    result: dict[str, Any] = summary(runs[0].id) if runs else {"status": "not created", "steps": []}
    result["error"] = error
    Path(out).write_text(json.dumps(result, default=str))
    return 0


def summary(run_id: Any) -> dict[str, Any]:
    """The run as the test checks it: every step run (retries included), oldest first."""
    client = Client()
    run = client.get_pipeline_run(run_id)
    steps = []
    for step_run in client.list_run_steps(pipeline_run_id=run.id, sort_by="asc:created", size=100).items:
        step_run = client.get_run_step(step_run.id)
        outputs = {}
        if step_run.status.value == "completed":
            outputs = {name: artifacts[0].load() for name, artifacts in step_run.outputs.items()}
        steps.append(
            {
                "name": step_run.name,
                "status": step_run.status.value,
                "start_time": step_run.start_time.timestamp() if step_run.start_time else None,
                "metadata": step_run.run_metadata.get("respools"),
                "outputs": outputs,
            }
        )
    return {"status": run.status.value, "steps": steps}


SCENARIOS = [
    "waiting",
    "train",
    "urgent",
    "too_big",
    "stubborn",
    "cached",
    "flaky",
    "impatient",
    "steadfast",
    "dynamic",
]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=SCENARIOS)
    parser.add_argument("--url", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--pool", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--go")
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--marker", default="")
    parser.add_argument("--release", default="", help="a file the step waits for (not the --go of the set-up)")
    args = parser.parse_args(argv)
    setup(args.url, args.token, args.pool)
    if args.go:
        while not Path(args.go).exists():
            time.sleep(0.05)

    def run() -> None:
        if args.scenario == "waiting":
            waiting_pipeline()
        elif args.scenario == "train":
            train_pipeline(iterations=args.iterations, marker=args.marker)
        elif args.scenario == "urgent":
            urgent_pipeline()
        elif args.scenario == "cached":
            cached_pipeline()
            cached_pipeline()
        elif args.scenario == "flaky":
            flaky_pipeline(marker=args.marker)
        elif args.scenario == "too_big":
            too_big_pipeline()
        elif args.scenario == "dynamic":
            dynamic_pipeline(marker_dir=args.marker, iterations=args.iterations)
        elif args.scenario == "impatient":
            impatient_pipeline()
        elif args.scenario == "steadfast":
            steadfast_pipeline(marker=args.marker, go=args.release)
        else:
            stubborn_pipeline(marker=args.marker)

    return run_and_summarize(run, args.out)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
