"""Real ZenML pipelines on the pooled local orchestrator against a real respools server.

Each pipeline run is a subprocess (``zenml_pipelines.py``) with a ZenML store of its own, as two teams'
pipelines would be; they meet only in the respools server. The step processes the orchestrator starts are
real too, so preemption arrives in the step as ``respools.LeasePreempted`` exactly as it would in a user's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from respools_server import RespoolsServer, World
from zenml_test_env import QUIET_ZENML_ENV

import respools
from respools.model import RequestSpec

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

SCRIPT = Path(__file__).with_name("zenml_pipelines.py")


@dataclass
class PipelineProcess:
    process: subprocess.Popen[bytes]
    out: Path
    log: Path

    def result(self, timeout: float) -> dict[str, Any]:
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            pytest.fail(f"pipeline did not finish in {timeout} s:\n{self.tail()}")
        assert self.process.returncode == 0, self.tail()
        result: dict[str, Any] = json.loads(self.out.read_text())
        return result

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-6000:]


@pytest.fixture
def start_pipeline(tmp_path: Path) -> Iterator[Callable[..., PipelineProcess]]:
    started: list[PipelineProcess] = []

    def start(
        scenario: str, world: World, name: str, *options: str, env: dict[str, str] | None = None
    ) -> PipelineProcess:
        workdir = tmp_path / name
        workdir.mkdir()
        env = {
            **os.environ,
            **QUIET_ZENML_ENV,
            "ZENML_CONFIG_PATH": str(workdir / "zenml"),
            "RESPOOLS_CONFIG": "",
            **(env or {}),
        }
        out, log = workdir / "summary.json", workdir / "pipeline.log"
        argv = [sys.executable, str(SCRIPT), scenario, "--url", world.url, "--token", world.token]
        argv += ["--pool", world.pool, "--out", str(out), *options]
        with log.open("wb") as sink:
            process = subprocess.Popen(argv, env=env, cwd=SCRIPT.parent, stdout=sink, stderr=subprocess.STDOUT)
        started.append(PipelineProcess(process, out, log))
        return started[-1]

    yield start
    for pipeline in started:
        if pipeline.process.poll() is None:
            pipeline.process.kill()
            pipeline.process.wait()


def wait_until(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    pytest.fail(f"timed out after {timeout} s waiting for {what}")


def steps_named(result: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [step for step in result["steps"] if step["name"] == name]


def progress_past(marker: Path, done: int) -> dict[str, Any] | None:
    """A step's progress marker once it has done more than `done` iterations: preempting earlier could catch a
    step with nothing to save, and its resume would prove nothing. A marker caught mid-write reads as not yet."""
    try:
        progress: dict[str, Any] = json.loads(marker.read_text())
    except (FileNotFoundError, ValueError):
        return None
    return progress if progress["done"] > done else None


def test_pipeline_waits_for_a_busy_pool_and_runs_when_it_frees(
    respools_server: RespoolsServer, start_pipeline: Callable[..., PipelineProcess]
) -> None:
    world = respools_server.world({"gpu": 1}, {"reserved": {"gpu": 1}, "priority": 10})
    client = respools.Client(world.url, world.token)
    holder = respools.lease(gpu=1, pool=world.pool, client=client, progress=False)
    holder.__enter__()  # someone else's job holds the pool's only GPU
    try:
        pipeline = start_pipeline("waiting", world, "waiting")

        def queued() -> dict[str, Any] | None:
            return next(
                (r for r in respools_server.requests(world.subject) if r["labels"].get("step") == "gpu_step"), None
            )

        request = wait_until(queued, 90, "the pipeline's gpu_step to queue for the GPU")
        time.sleep(2.0)  # it stays queued while the GPU is busy, and its step does not start
        request = next(r for r in respools_server.requests(world.subject) if r["id"] == request["id"])
        assert request["state"] == "pending"
        assert request["labels"]["pipeline"] == "waiting_pipeline"
        assert request["labels"]["zenml_run_id"]  # the run it serves (a local store has no dashboard URL)
        assert pipeline.process.poll() is None
    finally:
        released_at = time.time()
        holder.__exit__(None, None, None)
    client.close()

    result = pipeline.result(timeout=120)
    assert result["status"] == "completed", result
    (prepare,) = steps_named(result, "prepare")
    assert prepare["metadata"] is None  # no resources asked: no lease
    (gpu_step,) = steps_named(result, "gpu_step")
    assert gpu_step["status"] == "completed"
    assert gpu_step["outputs"]["output"]["started"] > released_at
    metadata = gpu_step["metadata"]
    assert metadata["pool"] == world.pool
    assert metadata["request_id"] == request["id"]
    assert metadata["lease_id"] == gpu_step["outputs"]["output"]["lease_id"]
    assert metadata["resources"] == {"gpu": 1, "step_run": 1}
    assert metadata["preempted"] is None and metadata["preemptions"] == []
    assert metadata["dashboard_url"] == f"{world.url}/#lease-{metadata['lease_id']}"  # the step run's way back
    leases = respools_server.leases(world.pool)
    ours = next(lease for lease in leases if lease["id"] == metadata["lease_id"])
    assert ours["state"] == "released"  # released when the step ended


def test_lower_priority_pipeline_is_preempted_checkpoints_and_resumes_after_retry(
    respools_server: RespoolsServer, start_pipeline: Callable[..., PipelineProcess], tmp_path: Path
) -> None:
    world = respools_server.world(
        {"gpu": 1}, {"reserved": {"gpu": 1}, "limit": {"gpu": 1}, "priority": 10}, preemption_grace_s=30
    )
    marker, go = tmp_path / "train-running.json", tmp_path / "go"
    iterations = 60
    train = start_pipeline("train", world, "train", "--iterations", str(iterations), "--marker", str(marker))
    urgent = start_pipeline("urgent", world, "urgent", "--go", str(go))

    first = wait_until(lambda: progress_past(marker, 2), 180, "train's first attempt to make progress")
    assert first["attempt"] == 0
    go.touch()  # the urgent pipeline (request priority 10 > 0, same subject) now asks for the only GPU

    urgent_result = urgent.result(timeout=120)
    train_result = train.result(timeout=150)

    assert urgent_result["status"] == "completed", urgent.tail()
    assert train_result["status"] == "completed", train.tail()
    attempts = steps_named(train_result, "train")
    assert [step["status"] for step in attempts] == ["retried", "completed"], attempts
    preempted, resumed = attempts

    # The first attempt got notice, saved its checkpoint and failed; ZenML retried it.
    notice = preempted["metadata"]["preempted"]
    assert notice is not None and notice["reason"] == "priority"
    assert preempted["metadata"]["attempt"] == 0
    # The retry waited for the same request (its place in the queue), got a new lease and resumed.
    assert resumed["metadata"]["request_id"] == preempted["metadata"]["request_id"]
    assert resumed["metadata"]["lease_id"] != preempted["metadata"]["lease_id"]
    assert resumed["metadata"]["attempt"] == 1
    assert [p["lease_id"] for p in resumed["metadata"]["preemptions"]] == [preempted["metadata"]["lease_id"]]
    output = resumed["outputs"]["output"]
    assert output["attempt"] == 1
    assert 0 < output["resumed_from"] < iterations
    assert output["done"] == iterations

    # The urgent step ran between the two attempts.
    (urgent_step,) = steps_named(urgent_result, "urgent")
    assert preempted["start_time"] < urgent_step["start_time"] < resumed["start_time"]
    assert urgent_step["outputs"]["output"]["finished"] < resumed["start_time"] + 5

    # Every lease ended with its step; the request ended released after attempt 1.
    leases = respools_server.leases(world.pool)
    assert all(lease["state"] in {"released", "preempted"} for lease in leases), leases
    request = next(r for r in respools_server.requests(world.subject) if r["id"] == resumed["metadata"]["request_id"])
    assert (request["state"], request["attempt"]) == ("released", 1)


def test_a_step_that_can_never_fit_fails_the_run_with_the_reason(
    respools_server: RespoolsServer, start_pipeline: Callable[..., PipelineProcess]
) -> None:
    world = respools_server.world({"gpu": 1}, {"reserved": {"gpu": 1}, "priority": 10})
    pipeline = start_pipeline("too_big", world, "too-big")
    result = pipeline.result(timeout=120)
    assert result["status"] == "failed", result
    assert "was rejected: asks for gpu 2 but pool" in pipeline.tail()
    assert [step["name"] for step in result["steps"]] == ["prepare"]  # gpu_step never started
    (request,) = respools_server.requests(world.subject)
    assert request["state"] == "rejected"


def test_a_step_that_ignores_its_notice_is_stopped_at_the_deadline(
    respools_server: RespoolsServer, start_pipeline: Callable[..., PipelineProcess], tmp_path: Path
) -> None:
    world = respools_server.world({"gpu": 1}, {"reserved": {"gpu": 1}, "priority": 10})
    marker = tmp_path / "stubborn.json"
    pipeline = start_pipeline("stubborn", world, "stubborn", "--marker", str(marker))
    holder = wait_until(lambda: marker.exists() and json.loads(marker.read_text()), 120, "the stubborn step")
    noticed = time.time()
    # A grace long enough for the notice to reach the step on a loaded 2-core CI machine.
    respools_server.ok("POST", f"/v1/leases/{holder['lease']}/preempt", json={"grace_s": 6})
    result = pipeline.result(timeout=90)
    assert time.time() - noticed < 60  # stopped at the deadline, not after its two-minute sleep
    assert result["status"] == "failed"
    (stubborn,) = steps_named(result, "stubborn")
    assert stubborn["status"] == "failed"  # recorded although its process was killed
    assert "ignoring the preemption notice" in pipeline.log.read_text(errors="replace")
    lease = next(lease for lease in respools_server.leases(world.pool) if lease["id"] == holder["lease"])
    assert lease["state"] == "preempted"


def test_a_cached_step_does_not_queue_for_gpus(
    respools_server: RespoolsServer, start_pipeline: Callable[..., PipelineProcess]
) -> None:
    world = respools_server.world({"gpu": 1}, {"reserved": {"gpu": 1}, "priority": 10})
    result = start_pipeline("cached", world, "cached").result(timeout=150)  # runs the pipeline twice
    assert result["status"] == "completed", result
    (featurize,) = steps_named(result, "featurize")
    assert featurize["status"] == "cached"
    requests = [r for r in respools_server.requests(world.subject) if r["labels"]["step"] == "featurize"]
    assert [r["state"] for r in requests] == ["released"]  # the first run's only


def test_an_ordinary_failure_releases_the_lease_and_the_retry_asks_anew(
    respools_server: RespoolsServer, start_pipeline: Callable[..., PipelineProcess], tmp_path: Path
) -> None:
    world = respools_server.world({"gpu": 1}, {"reserved": {"gpu": 1}, "priority": 10})
    marker = tmp_path / "first-attempt"
    result = start_pipeline("flaky", world, "flaky", "--marker", str(marker)).result(timeout=150)
    assert result["status"] == "completed", result
    failed, succeeded = steps_named(result, "flaky")
    assert (failed["status"], succeeded["status"]) == ("retried", "completed")
    assert failed["metadata"]["lease_id"] == marker.read_text()
    assert failed["metadata"]["preempted"] is None
    # The failed attempt released its lease; its request had ended, so the retry made a new one.
    requests = {r["id"]: r for r in respools_server.requests(world.subject)}
    assert failed["metadata"]["request_id"] != succeeded["metadata"]["request_id"]
    assert {r["state"] for r in requests.values()} == {"released"}
    assert requests[succeeded["metadata"]["request_id"]]["idempotency_key"].endswith("#1")
    assert succeeded["outputs"]["output"] == succeeded["metadata"]["lease_id"]


def test_a_run_logging_info_prints_no_request_lines_and_no_wait_for_a_step_granted_at_once(
    respools_server: RespoolsServer, start_pipeline: Callable[..., PipelineProcess]
) -> None:
    """As a ZenML user sees it (INFO, ZenML's default): the SDK's heartbeats and long-polls print no
    "HTTP Request" line, and a step granted at once prints no "waiting for" line."""
    world = respools_server.world({"gpu": 1}, {"reserved": {"gpu": 1}, "priority": 10})
    pipeline = start_pipeline("waiting", world, "info", env={"ZENML_LOGGING_VERBOSITY": "INFO"})
    result = pipeline.result(timeout=120)
    assert result["status"] == "completed", result
    log = pipeline.log.read_text(errors="replace")
    assert "gpu_step" in log, "ZenML logged at INFO: the run's own lines are there"
    assert log.count("HTTP Request:") == 0, pipeline.tail()
    assert log.count("waiting for") == 0, pipeline.tail()


def test_a_step_not_granted_within_its_allocation_wait_timeout_fails_and_its_request_is_cancelled(
    respools_server: RespoolsServer, start_pipeline: Callable[..., PipelineProcess]
) -> None:
    world = respools_server.world({"gpu": 1}, {"reserved": {"gpu": 1}, "priority": 10})
    client = respools.Client(world.url, world.token)
    with respools.lease(gpu=1, pool=world.pool, client=client, progress=False):  # the pool stays busy
        pipeline = start_pipeline("impatient", world, "impatient")
        result = pipeline.result(timeout=120)
    client.close()
    assert result["status"] == "failed", result
    assert "Timed out after 2 seconds waiting for respools request" in pipeline.tail()
    assert "allocation_wait_timeout_seconds" in pipeline.tail()
    (request,) = [r for r in respools_server.requests(world.subject) if r["labels"].get("step") == "impatient"]
    assert request["state"] == "cancelled"  # no place kept in the queue, nothing granted later


def test_a_step_with_reclaim_tolerance_none_is_never_preempted(
    respools_server: RespoolsServer, start_pipeline: Callable[..., PipelineProcess], tmp_path: Path
) -> None:
    world = respools_server.world({"gpu": 1}, {"reserved": {"gpu": 1}, "priority": 10}, preemption_grace_s=1)
    marker, release = tmp_path / "steadfast.json", tmp_path / "release"
    pipeline = start_pipeline("steadfast", world, "steadfast", "--marker", str(marker), "--release", str(release))
    held = wait_until(lambda: marker.exists() and json.loads(marker.read_text()), 120, "the steadfast step")
    client = respools.Client(world.url, world.token)
    # A request of the same subject with a higher priority would preempt a preemptible step at once.
    urgent = client.submit(RequestSpec(resources={"gpu": 1}, priority=100, pools=[world.pool]))
    time.sleep(3.0)  # three reconciler ticks and more than the grace
    lease = next(lease for lease in respools_server.leases(world.pool) if lease["id"] == held["lease"])
    assert lease["state"] == "active" and lease["preempt_deadline"] is None
    assert client.get_request(urgent.id).state.value == "pending"
    release.touch()
    result = pipeline.result(timeout=120)
    assert result["status"] == "completed", result
    (steadfast,) = steps_named(result, "steadfast")
    assert steadfast["outputs"]["output"]["preemptible"] is False
    assert steadfast["metadata"]["preemptions"] == []
    granted = wait_until(lambda: client.get_request(urgent.id).lease_id, 30, "the urgent request's grant")
    client.release(granted)
    client.close()


def test_dynamic_pipeline_runs_two_concurrent_pooled_steps_and_retries_the_preempted_one(
    respools_server: RespoolsServer, start_pipeline: Callable[..., PipelineProcess], tmp_path: Path
) -> None:
    """Two steps launched concurrently from a dynamic pipeline (ZenML's worker threads), each with its own
    lease and process; one is preempted, checkpoints, and ZenML's retry resumes it on the same request while
    the other runs on untouched."""
    world = respools_server.world({"gpu": 2}, {"reserved": {"gpu": 2}, "priority": 10})
    markers = tmp_path / "markers"
    markers.mkdir()
    iterations = 60
    pipeline = start_pipeline(
        "dynamic",
        world,
        "dynamic",
        "--marker",
        str(markers),
        "--iterations",
        str(iterations),
        env={"ZENML_DYNAMIC_PIPELINE_MONITORING_INTERVAL": "0.5"},
    )

    def both_running() -> dict[str, str] | None:
        found = {name: progress_past(markers / f"{name}-0.json", 2) for name in ("a", "b")}
        if not all(found.values()):
            return None
        return {name: progress["lease"] for name, progress in found.items() if progress}

    leases = wait_until(both_running, 180, "both concurrent steps to hold their leases")
    assert leases["a"] != leases["b"]
    respools_server.ok("POST", f"/v1/leases/{leases['a']}/preempt", json={"grace_s": 10})
    result = pipeline.result(timeout=150)

    assert result["status"] == "completed", pipeline.tail()
    runs_a, runs_b = steps_named(result, "worker_a"), steps_named(result, "worker_b")
    assert [step["status"] for step in runs_a] == ["retried", "completed"], runs_a
    assert [step["status"] for step in runs_b] == ["completed"], runs_b
    preempted, resumed = runs_a
    assert preempted["metadata"]["preempted"]["reason"] is not None
    assert resumed["metadata"]["request_id"] == preempted["metadata"]["request_id"]  # its place in the queue
    assert resumed["metadata"]["attempt"] == 1
    assert 0 < resumed["outputs"]["output"]["resumed_from"] < iterations
    assert resumed["outputs"]["output"]["done"] == iterations
    (only_b,) = runs_b
    assert only_b["metadata"]["lease_id"] == leases["b"] and only_b["metadata"]["preemptions"] == []
    requests = [r for r in respools_server.requests(world.subject)]
    assert {r["labels"]["step"] for r in requests} == {"worker_a", "worker_b"}
    assert all(lease["state"] in {"released", "preempted"} for lease in respools_server.leases(world.pool))
