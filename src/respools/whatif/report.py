"""Figures of a replay, side by side with its work-conserving reference.

Utilization is measured in one window per trace: from second 0 to the last submission, the span in
which demand keeps arriving (a trace submitted at one instant uses the reference's makespan instead).
Busy time is clipped to that window on both sides, so the two figures mean the same thing; how much
longer respools takes to drain its queue after the last arrival shows in the waits instead.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from respools.model import GPU, MILLI
from respools.scheduling import pool_capacity
from respools.whatif.reference import ReferenceRun
from respools.whatif.replay import JobRecord, RunResult


@dataclass
class PoolFigures:
    pool: str
    gpus: float
    utilization: float
    reference_utilization: float
    busy_gpu_h: float
    reference_busy_gpu_h: float

    @property
    def of_reference(self) -> float | None:
        return self.utilization / self.reference_utilization if self.reference_utilization else None


@dataclass
class SubjectFigures:
    subject: str
    jobs: int = 0
    done: int = 0
    rejected: int = 0
    gave_up: int = 0
    unfinished: int = 0
    wait_p50_s: float = 0.0
    wait_p95_s: float = 0.0
    wait_max_s: float = 0.0
    in_share_gpu_h: float = 0.0
    borrowed_gpu_h: float = 0.0
    preemptions: int = 0
    preempted_gpu_h: float = 0.0
    lost_gpu_h: float = 0.0
    share: float = 0.0
    entitlement: float = 0.0


@dataclass
class Figures:
    label: str
    window_s: float
    cycles: int
    wall_s: float
    pools: list[PoolFigures] = field(default_factory=list)
    subjects: list[SubjectFigures] = field(default_factory=list)

    @property
    def utilization(self) -> float:
        gpus = sum(p.gpus for p in self.pools)
        return sum(p.utilization * p.gpus for p in self.pools) / gpus if gpus else 0.0

    @property
    def reference_utilization(self) -> float:
        gpus = sum(p.gpus for p in self.pools)
        return sum(p.reference_utilization * p.gpus for p in self.pools) / gpus if gpus else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "window_s": self.window_s,
            "cycles": self.cycles,
            "wall_s": round(self.wall_s, 3),
            "utilization": round(self.utilization, 4),
            "reference_utilization": round(self.reference_utilization, 4),
            "pools": [
                {**vars(p), "of_reference": None if p.of_reference is None else round(p.of_reference, 4)}
                for p in self.pools
            ],
            "subjects": [vars(s) for s in self.subjects],
        }


def figures(run: RunResult, reference: ReferenceRun, last_submit_s: float) -> Figures:
    window = last_submit_s if last_submit_s > 0 else max(reference.end_s, 1e-9)
    out = Figures(run.label, window, run.cycles, run.wall_s)
    for pool in run.pools:
        gpus = pool_capacity(pool).get(GPU, 0) / MILLI
        busy = sum(_clip(r.start_s, r.end_s, window) * r.gpu for r in run.leases if r.pool == pool.name)
        ref = sum(_clip(start, end, window) * g for start, end, g in reference.busy_gpu_s.get(pool.name, ()))
        usable = gpus * window
        out.pools.append(
            PoolFigures(
                pool.name,
                gpus,
                busy / usable if usable else 0.0,
                ref / usable if usable else 0.0,
                busy / 3600,
                ref / 3600,
            )
        )
    total_gpu_s = sum(p.gpus for p in out.pools) * window
    reserved: dict[str, float] = defaultdict(float)
    for policy in run.policies:
        reserved[policy.subject] += policy.reserved.get(GPU, 0) / MILLI
    by_subject: dict[str, SubjectFigures] = {}
    jobs_of: dict[str, list[JobRecord]] = defaultdict(list)
    for job in run.jobs:
        jobs_of[job.subject].append(job)
    for name in sorted(set(jobs_of) | set(reserved)):
        figures_ = by_subject[name] = SubjectFigures(name)
        jobs = jobs_of.get(name, [])
        figures_.jobs = len(jobs)
        for job in jobs:
            match job.outcome:
                case "done":
                    figures_.done += 1
                case "rejected":
                    figures_.rejected += 1
                case "preempted":
                    figures_.gave_up += 1
                case _:
                    figures_.unfinished += 1
        waits = sorted(job.waited_s for job in jobs if job.outcome != "rejected")
        if waits:
            figures_.wait_p50_s = statistics.median(waits)
            figures_.wait_p95_s = waits[min(len(waits) - 1, int(0.95 * len(waits)))]
            figures_.wait_max_s = waits[-1]
        pool_gpus = sum(p.gpus for p in out.pools)
        figures_.entitlement = reserved[name] / pool_gpus if pool_gpus else 0.0
    used_in_window: dict[str, float] = defaultdict(float)
    for lease in run.leases:
        entry = by_subject.setdefault(lease.subject, SubjectFigures(lease.subject))
        held_h = (lease.end_s - lease.start_s) / 3600
        share = lease.borrowed_gpu / lease.gpu if lease.gpu else 0.0
        entry.borrowed_gpu_h += held_h * lease.gpu * share
        entry.in_share_gpu_h += held_h * lease.gpu * (1 - share)
        used_in_window[lease.subject] += _clip(lease.start_s, lease.end_s, window) * lease.gpu
        if lease.preempted:
            entry.preemptions += 1
            entry.preempted_gpu_h += held_h * lease.gpu
            entry.lost_gpu_h += lease.lost_s * lease.gpu / 3600
    for name, entry in by_subject.items():
        entry.share = used_in_window[name] / total_gpu_s if total_gpu_s else 0.0
    out.subjects = [by_subject[name] for name in sorted(by_subject)]
    return out


def _clip(start: float, end: float, window: float) -> float:
    return max(0.0, min(end, window) - max(start, 0.0))


SUBJECT_COLUMNS = (
    "subject",
    "steps",
    "done",
    "rejected",
    "wait p50 (min)",
    "p95",
    "max",
    "in-share GPU-h",
    "borrowed GPU-h",
    "preemptions",
    "preempted GPU-h",
    "lost GPU-h",
    "share",
    "entitled",
)


def subject_cells(s: SubjectFigures) -> list[str]:
    """One subject's figures as the terminal table and the HTML report show them (``SUBJECT_COLUMNS``)."""
    return [
        s.subject,
        str(s.jobs),
        str(s.done),
        str(s.rejected),
        f"{s.wait_p50_s / 60:.1f}",
        f"{s.wait_p95_s / 60:.1f}",
        f"{s.wait_max_s / 60:.1f}",
        f"{s.in_share_gpu_h:,.0f}",
        f"{s.borrowed_gpu_h:,.0f}",
        str(s.preemptions),
        f"{s.preempted_gpu_h:,.0f}",
        f"{s.lost_gpu_h:,.0f}",
        f"{s.share:.1%}",
        f"{s.entitlement:.1%}",
    ]
