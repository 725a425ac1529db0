"""The simulator against the real thing: one small trace replayed by ``respools.whatif`` and driven through
a real ``respools server`` by real SDK clients in fast time (one trace second is one wall second), with
the same definitions. Both must grant the same steps in the same order, preempt the same ones and end
each the same way.

The trace is built so that the outcome does not hang on sub-second timing: every decision is a second
or more from the next. A borrower holds 3 + 1 GPUs of a 4-GPU pool; the owner's 2-GPU step reclaims;
DESIGN §2.5's minimal victim set is the 3-GPU lease alone (the more recent 1-GPU lease is taken first,
then dropped in the fill-back as not needed); the 3-GPU step is requeued, runs again once the owner is
done, and everything finishes."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import respools
from respools.client import Client
from respools.model import PolicySpec, PoolSpec
from respools.server.process import ServerProcess
from respools.whatif.replay import ReplayOptions, replay
from respools.whatif.trace import TraceJob
from tests.client.server import ADMIN_TOKEN, client_test_server

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = client_test_server(Path(tmp_path_factory.mktemp("whatif-service")))
    process.start()
    try:
        yield process
    finally:
        process.stop()


def trace(borrower: str, owner: str) -> list[TraceJob]:
    rows = [
        ("three", 0.0, borrower, 3, 4.0, True),
        ("one", 0.5, borrower, 1, 7.0, True),
        ("owner", 2.0, owner, 2, 2.0, False),
    ]
    return [
        TraceJob(
            id=id,
            submit_s=at,
            subject=subject,
            resources={"gpu": gpu},
            runtime_s=runtime,
            preemptible=preemptible,
            max_retries=1 if preemptible else 0,
        )
        for id, at, subject, gpu, runtime, preemptible in rows
    ]


def test_the_simulator_decides_what_the_service_decides(server: ServerProcess, tmp_path: Path) -> None:
    suffix = uuid.uuid4().hex[:8]
    pool, borrower, owner = f"sim-{suffix}", f"borrower-{suffix}", f"owner-{suffix}"
    pools = [PoolSpec(name=pool, capacity={"gpu": 4}, preemption_grace_s=20, lease_ttl_s=30)]
    policies = [
        PolicySpec(subject=borrower, pool=pool, priority=10),
        PolicySpec(subject=owner, pool=pool, reserved={"gpu": 4}, priority=10),
    ]
    jobs = trace(borrower, owner)

    simulated = replay(jobs, pools, policies, options=ReplayOptions(cycle_s=0.1, step_aside_s=0.0))
    sim_grants = [r.job_id for r in sorted(simulated.leases, key=lambda r: r.start_s)]
    sim_outcomes = {j.job_id: (j.outcome, j.preemptions) for j in simulated.jobs}

    grants, outcomes = drive_service(server, pools[0], policies, jobs)

    assert sim_grants == ["three", "one", "owner", "three"], "the trace does what its docstring says"
    assert grants == sim_grants
    assert outcomes == sim_outcomes == {"three": ("done", 1), "one": ("done", 0), "owner": ("done", 0)}


def drive_service(
    server: ServerProcess, pool: PoolSpec, policies: list[PolicySpec], jobs: list[TraceJob]
) -> tuple[list[str], dict[str, tuple[str, int]]]:
    """Each trace step in a thread of its own, as a pipeline step would hold its lease: submit at its
    time, work for what remains of its run time (no checkpoint: a preempted attempt starts over), and let
    ``respools.requires`` requeue it on preemption."""
    grants: list[str] = []
    outcomes: dict[str, tuple[str, int]] = {}
    errors: list[BaseException] = []
    lock = threading.Lock()
    with Client(server.url, ADMIN_TOKEN) as admin:
        admin.put(f"/v1/pools/{pool.name}", pool.model_dump(mode="json", exclude_none=True))
        tokens = {}
        for policy in policies:
            admin.put(f"/v1/subjects/{policy.subject}", {"name": policy.subject})
            admin.post("/v1/policies", policy.model_dump(mode="json", exclude_none=True))
            tokens[policy.subject] = admin.post("/v1/tokens", {"role": "subject", "subject": policy.subject})["token"]
        t0 = time.monotonic() + 0.5

        def step(job: TraceJob) -> None:
            preemptions = 0
            try:
                with Client(server.url, tokens[job.subject]) as client:
                    time.sleep(max(0.0, t0 + job.submit_s - time.monotonic()))

                    @respools.requires(
                        gpu=job.resources["gpu"] / 1000,
                        preemptible=job.preemptible,
                        max_retries=job.max_retries,
                        retry_backoff_s=0.0,
                        client=client,
                        progress=False,
                    )
                    def work() -> None:
                        nonlocal preemptions
                        with lock:
                            grants.append(job.id)
                        end = time.monotonic() + job.runtime_s
                        try:
                            while time.monotonic() < end:
                                time.sleep(0.02)
                        except respools.LeasePreempted:
                            preemptions += 1
                            raise

                    work()
                    outcomes[job.id] = ("done", preemptions)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=step, args=(job,), daemon=True) for job in jobs]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    assert not errors, errors
    return grants, outcomes
