"""Synthetic traces shaped like a real multi-tenant GPU cluster.

The shapes follow the workload study of Microsoft's Philly cluster (Jeon et al., "Analysis of Large-Scale
Multi-Tenant GPU Clusters for DNN Training Workloads", USENIX ATC 2019): most jobs ask for one GPU and a
minority for 2, 4, 8 or several hosts of 8 (gang-scheduled); run times are heavy-tailed, from minutes
to days; submissions follow the working day, with weekends quieter; and a few teams submit most of
the work. The parameters below are respools' defaults chosen to reproduce those shapes, not values
fitted to the published trace (it cannot be fetched here); each is an argument, so a platform team can
put its own cluster's figures in. Run times are scaled so the trace offers ``load`` of the fleet's
GPU-time, which is what makes a trace of any size interesting to schedule.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from respools.whatif.trace import MAX_RUNTIME_S, TraceJob

GPU_SHAPES: tuple[tuple[int, int, float], ...] = (
    # (GPUs per replica, replicas, probability)
    (1, 1, 0.70),
    (2, 1, 0.10),
    (4, 1, 0.09),
    (8, 1, 0.08),
    (8, 2, 0.03),
)
HOURLY_WEIGHT: tuple[float, ...] = (
    # submissions by hour of a weekday (UTC of the trace), relative; the working day carries the peak
    0.45, 0.4, 0.35, 0.35, 0.35, 0.4, 0.5, 0.7, 0.95, 1.2, 1.35, 1.4,
    1.3, 1.35, 1.45, 1.45, 1.4, 1.3, 1.1, 0.95, 0.8, 0.7, 0.6, 0.5,
)  # fmt: skip
WEEKEND_FACTOR = 0.55
RUNTIME_SIGMA = 1.6  # log-normal spread: a median of minutes with a tail of days
MIN_RUNTIME_S = 60.0


@dataclass(frozen=True)
class SyntheticSpec:
    gpus: int
    jobs: int
    days: float = 7.0
    subjects: Sequence[str] = ("team-1", "team-2", "team-3", "team-4")
    load: float = 0.85
    preemptible_share: float = 0.7
    checkpoint_s: float = 1800.0
    max_retries: int = 3
    seed: int = 1


def generate(spec: SyntheticSpec) -> list[TraceJob]:
    """``spec.jobs`` steps over ``spec.days``, sorted by submission."""
    if spec.jobs < 1 or spec.gpus < 1 or spec.days <= 0 or not spec.subjects:
        raise ValueError("a synthetic trace needs at least one job, one GPU, a positive length and a subject")
    rng = random.Random(spec.seed)
    span = spec.days * 86400.0
    # Teams by a Zipf-like weight: the first submits the most.
    team_weights = [1 / (rank + 1) for rank in range(len(spec.subjects))]
    shapes = [(g, r) for g, r, _ in GPU_SHAPES]
    shape_weights = [p for _, _, p in GPU_SHAPES]
    mean_gpus = sum(g * r * p for g, r, p in GPU_SHAPES)
    # Median run time such that the offered GPU-time is `load` of the fleet's (log-normal mean = median·e^(σ²/2)).
    mean_runtime = spec.load * spec.gpus * span / (spec.jobs * mean_gpus)
    median = mean_runtime / math.exp(RUNTIME_SIGMA**2 / 2)
    submits = sorted(_submission_time(rng, span) for _ in range(spec.jobs))
    jobs = []
    for index, submit in enumerate(submits):
        gpus, replicas = rng.choices(shapes, shape_weights)[0]
        preemptible = rng.random() < spec.preemptible_share
        runtime = min(max(rng.lognormvariate(math.log(median), RUNTIME_SIGMA), MIN_RUNTIME_S), MAX_RUNTIME_S / 30)
        jobs.append(
            TraceJob(
                id=f"syn-{index + 1}",
                submit_s=round(submit, 3),
                subject=rng.choices(spec.subjects, team_weights)[0],
                resources={"gpu": gpus},
                replicas=replicas,
                runtime_s=round(runtime, 3),
                preemptible=preemptible,
                max_retries=spec.max_retries if preemptible else 0,
                checkpoint_s=spec.checkpoint_s if preemptible else None,
            )
        )
    return jobs


def _submission_time(rng: random.Random, span: float) -> float:
    """One submission instant by rejection sampling against the hourly and weekend weights."""
    peak = max(HOURLY_WEIGHT)
    while True:
        at = rng.uniform(0, span)
        day, hour = int(at // 86400) % 7, int(at % 86400 // 3600)
        weight = HOURLY_WEIGHT[hour] * (WEEKEND_FACTOR if day >= 5 else 1.0)  # the trace starts on a Monday
        if rng.random() * peak <= weight:
            return at
