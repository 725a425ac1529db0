"""A pending request as the cycle sees it: demand, device shape and the pools it may go to."""

from __future__ import annotations

from dataclasses import dataclass

from respools.model import STEP_RUN, Request
from respools.scheduling.placement import Shape, shape_of
from respools.scheduling.state import PoolState, SubjectQuota
from respools.scheduling.vectors import Vector, scaled


@dataclass(slots=True)
class RequestView:
    request: Request
    id: str
    subject: str
    demand: Vector
    """Resources times replicas: what the quota is charged."""
    shape: Shape
    preemptible: bool
    priority: int
    submitted_ts: float
    candidates: list[tuple[PoolState, SubjectQuota]]
    """Eligible pools in policy-priority order."""
    signature: tuple[object, ...]
    """Requests of one subject with equal signatures fail alike when one's demand dominates the other's."""


def view_of(request: Request) -> RequestView:
    shape = shape_of(request.resources, request.replicas, request.gpu_class, request.selectors)
    return RequestView(
        request=request,
        id=request.id,
        subject=request.subject,
        demand={**scaled(request.resources, request.replicas), STEP_RUN: request.resources.get(STEP_RUN, 1)},
        shape=shape,
        preemptible=request.preemptible,
        priority=request.priority,
        submitted_ts=request.submitted_at.timestamp(),
        candidates=[],
        signature=(),
    )
