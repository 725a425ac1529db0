"""The what-if replay on traces small enough to work out by hand: each figure asserted here is derived in
the test's docstring from DESIGN §2 and the trace, not read back from a run."""

from __future__ import annotations

from datetime import timedelta

import pytest

from respools.model import PolicySpec, PoolSpec, ReservationSpec
from respools.whatif.reference import work_conserving
from respools.whatif.replay import DEFAULT_START, ReplayOptions, replay
from respools.whatif.report import figures
from respools.whatif.trace import TraceJob

POOL = [PoolSpec(name="p", capacity={"gpu": 8}, preemption_grace_s=60)]
OWNER_AND_BORROWER = [
    PolicySpec(subject="borrower", pool="p", reserved={"gpu": 4}, priority=10),
    PolicySpec(subject="owner", pool="p", reserved={"gpu": 4}, priority=10),
]


def job(id: str, at: float, subject: str, gpu: float, runtime: float, **more: object) -> TraceJob:
    return TraceJob.model_validate(
        {"id": id, "submit_s": at, "subject": subject, "resources": {"gpu": gpu}, "runtime_s": runtime, **more}
    )


def test_a_reclaimed_borrower_steps_aside_resumes_from_its_checkpoint_and_finishes() -> None:
    """The borrower takes all 8 GPUs at 0 (4 borrowed). The owner asks for its 4 at 1000: reclaim. The
    cycle at 1000 gives notice; the borrower steps aside at 1005 having worked 1005 s, of which its
    10-minute checkpoints kept 600 (405 s lost on 8 GPUs); it is requeued and the owner granted at the
    next cycle (1010). When the owner leaves (2810) the borrower runs its remaining 3000 s: done at 5810."""
    jobs = [
        job("b", 0, "borrower", 8, 3600, preemptible=True, max_retries=1, checkpoint_s=600),
        job("o", 1000, "owner", 4, 1800),
    ]
    run = replay(jobs, POOL, OWNER_AND_BORROWER)
    spans = [(r.job_id, r.start_s, r.end_s, r.preempted) for r in run.leases]
    assert spans == [("b", 0, 1005, True), ("o", 1010, 2810, False), ("b", 2810, 5810, False)]
    borrower, owner = run.jobs
    assert (borrower.outcome, borrower.preemptions, borrower.waited_s) == ("done", 1, 2810 - 1005)
    assert (owner.outcome, owner.waited_s) == ("done", 10)
    lost = next(r for r in run.leases if r.preempted)
    assert lost.lost_s == 405 and lost.gpu == 8 and lost.borrowed_gpu == 4


def test_figures_split_in_share_and_borrowed_and_compare_with_the_reference() -> None:
    """The same two steps and a last one submitted at 6000: the window is 0-6000 s of 8 GPUs (48,000 GPU-s).
    Reference: b runs 0-3600 on 8 GPUs, o waits for it and runs 3600-5400 on 4: 36,000 GPU-s busy. respools:
    8·1005 + 4·1800 + 8·3000 = 39,240 GPU-s: busier than the reference, by the 405 s on 8 GPUs that the
    preemption threw away and b ran again."""
    jobs = [
        job("b", 0, "borrower", 8, 3600, preemptible=True, max_retries=1, checkpoint_s=600),
        job("o", 1000, "owner", 4, 1800),
        job("last", 6000, "owner", 1, 1),
    ]
    run = replay(jobs, POOL, OWNER_AND_BORROWER)
    reference = work_conserving(jobs, POOL, OWNER_AND_BORROWER)
    out = figures(run, reference, last_submit_s=6000)
    assert out.window_s == 6000
    (pool,) = out.pools
    assert pool.reference_utilization == pytest.approx(36_000 / 48_000)
    assert pool.utilization == pytest.approx(39_240 / 48_000)
    borrower = next(s for s in out.subjects if s.subject == "borrower")
    # Each of b's leases held 8 GPUs, 4 of them borrowed: (1005 + 3000) s · 4 GPUs each side.
    assert borrower.in_share_gpu_h == pytest.approx(4005 * 4 / 3600)
    assert borrower.borrowed_gpu_h == pytest.approx(4005 * 4 / 3600)
    assert borrower.preemptions == 1 and borrower.lost_gpu_h == pytest.approx(405 * 8 / 3600)
    assert borrower.entitlement == 0.5
    assert borrower.share == pytest.approx((8 * 1005 + 8 * 3000) / 48_000)


def test_a_step_out_of_retries_ends_preempted_and_one_that_can_never_fit_is_rejected() -> None:
    jobs = [
        job("b", 0, "borrower", 8, 3600, preemptible=True, max_retries=0),
        job("o", 10, "owner", 4, 100),
        job("huge", 20, "owner", 16, 100),
    ]
    run = replay(jobs, POOL, OWNER_AND_BORROWER)
    outcomes = {j.job_id: j.outcome for j in run.jobs}
    assert outcomes == {"b": "preempted", "o": "done", "huge": "rejected"}
    assert "16" in (next(j for j in run.jobs if j.job_id == "huge").reason or "")
    assert next(r for r in run.leases if r.job_id == "b").lost_s == 15, "no checkpoint: all 15 s of work lost"


def test_a_reservation_window_opening_runs_a_cycle_and_reclaims() -> None:
    """No arrival at 3600, yet the window opening then must let the reservation's subject in: the replay
    runs a cycle at each window edge. The borrower holds all 8 from 0; 'late' waits for 4 from 60, within
    its reserved share of 0 it cannot reclaim; its reservation of 4 from 3600 can."""
    policies = [
        PolicySpec(subject="borrower", pool="p", reserved={"gpu": 4}, priority=10),
        PolicySpec(subject="late", pool="p", priority=10),
    ]
    window = ReservationSpec(
        subject="late",
        pool="p",
        resources={"gpu": 4},
        start=DEFAULT_START + timedelta(seconds=3600),
        end=DEFAULT_START + timedelta(seconds=7200),
    )
    jobs = [
        job("b", 0, "borrower", 8, 10_000, preemptible=True, max_retries=1),
        job("l", 60, "late", 4, 100, preemptible=True),
    ]
    run = replay(jobs, POOL, policies, [window], options=ReplayOptions(cycle_s=10))
    late = next(r for r in run.leases if r.job_id == "l")
    assert late.start_s == 3610, "notice at the window's cycle (3600), granted once the borrower stepped aside"
    assert next(j for j in run.jobs if j.job_id == "l").waited_s == 3550


def test_the_reference_lets_small_steps_pass_a_head_that_does_not_fit() -> None:
    """8 GPUs: a 6-GPU step runs 0-100; an 8-GPU step waits for it; a 2-GPU step submitted after the 8 fits
    beside the 6 at once (work-conserving), then the 8 runs 100-200."""
    jobs = [job("six", 0, "owner", 6, 100), job("eight", 1, "owner", 8, 100), job("two", 2, "owner", 2, 50)]
    reference = work_conserving(jobs, POOL, OWNER_AND_BORROWER)
    assert sorted(reference.busy_gpu_s["p"]) == [(0, 100, 6.0), (2, 52, 2.0), (100, 200, 8.0)]
    assert reference.end_s == 200
