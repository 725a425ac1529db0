"""How keys, amounts, durations and holders read on the dashboard.

Kept out of the templates so that a number reads the same in every table, chart and tooltip: GPUs as
decimals (``1.5``, not ``1500`` milli-GPU), other keys as integers with thousands separators."""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime

from respools.model import (
    GPU,
    GPU_MEMORY_MB,
    MCPU,
    MEMORY_MB,
    MILLI,
    STEP_RUN,
    PlacementItem,
    WaitReason,
    is_mig_key,
)

PALETTE_SIZE = 8
"""Holder colours (``holder-0`` … ``holder-7`` in the stylesheet), chosen to stay apart for the
common forms of colour blindness; labels always carry the name too."""

_SUPPORTING_KEYS = (GPU_MEMORY_MB, STEP_RUN, MCPU, MEMORY_MB)

WAIT_REASONS: dict[WaitReason, str] = {
    WaitReason.NO_CAPACITY: "no free capacity",
    WaitReason.FRAGMENTED: "free capacity is split across GPUs",
    WaitReason.LIMIT: "at its limit",
    WaitReason.RESERVED_SHARE: "reserved share in use (not preemptible)",
    WaitReason.STEP_RUN_SLOTS: "no step_run slot free",
    WaitReason.HELD_FOR_PREEMPTOR: "capacity held for a preempting request",
    WaitReason.PREEMPTING: "waiting for preempted leases to end",
    WaitReason.RESERVATION_WINDOW: "would overlap a reservation window",
    WaitReason.POOL_DRAINING: "pool is draining",
}

LABEL_KEYS = ("pipeline", "run", "step")
"""The labels a pipeline step carries, shown in this order before any other label."""
LINK_LABEL = "run_url"
"""A label holding the page of the work a lease serves in its orchestrator (a ZenML run's dashboard page):
shown as a link, not as text."""


def key_rank(key: str) -> tuple[int, str]:
    """Sort order of resource keys: GPUs, MIG slices, custom keys, then the supporting keys."""
    if key == GPU:
        return (0, key)
    if is_mig_key(key):
        return (1, key)
    if key in _SUPPORTING_KEYS:
        return (3 + _SUPPORTING_KEYS.index(key), key)
    return (2, key)


def ordered_keys(keys: Iterable[str]) -> list[str]:
    return sorted(set(keys), key=key_rank)


def primary_key(capacity: Mapping[str, int]) -> str | None:
    """The key a pool's charts follow: the first metered key in :func:`key_rank` order, so ``gpu`` when
    the pool has whole GPUs, a MIG profile when every GPU is partitioned."""
    for key in ordered_keys(capacity):
        if capacity[key] > 0:
            return key
    return None


def amount(key: str, value: float) -> str:
    if key == GPU:
        return f"{value / MILLI:,.3f}".rstrip("0").rstrip(".")
    return f"{round(value):,}"


def vector(resources: Mapping[str, int], *, skip: Iterable[str] = (STEP_RUN,)) -> str:
    """``gpu 1.5 · mcpu 4,000`` (``step_run``, which every request carries, left out by default)."""
    skipped = set(skip)
    parts = [f"{key} {amount(key, resources[key])}" for key in ordered_keys(resources) if key not in skipped]
    return " · ".join(parts) or "—"


def duration(seconds: float) -> str:
    """A compact duration: ``42 s``, ``3 m 10 s``, ``2 h 05 m``, ``3 d 4 h``."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} m {s % 60:02d} s"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60:02d} m"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def iso(moment: datetime) -> str:
    """An ISO timestamp in UTC with a ``Z``, as ``<time datetime>`` and the scripts read it (to the
    millisecond, so a countdown the script ticks agrees with the one the server rendered)."""
    return as_utc(moment).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def clock(moment: datetime) -> str:
    return as_utc(moment).strftime("%Y-%m-%d %H:%M:%S UTC")


def as_utc(moment: datetime) -> datetime:
    """Stored times are aware; a reservation written without a zone is read as UTC, as the scheduler does."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def holder_color(subject: str | None) -> int:
    """A stable colour per subject (the same team keeps its colour across pools and reloads)."""
    if subject is None:
        return PALETTE_SIZE  # the neutral "someone else" colour
    return zlib.crc32(subject.encode()) % PALETTE_SIZE


def step_labels(labels: Mapping[str, str]) -> str:
    """``pipeline / run / step`` for the labels a step carries; other labels follow as ``key=value``."""
    main = [labels[k] for k in LABEL_KEYS if labels.get(k)]
    rest = [f"{k}={v}" for k, v in sorted(labels.items()) if k not in LABEL_KEYS and k != LINK_LABEL]
    return " / ".join(main) + (" · " if main and rest else "") + ", ".join(rest)


def label_link(labels: Mapping[str, str]) -> str | None:
    """The orchestrator page a lease links to: its ``run_url`` label, if it is an http(s) address (a label is
    the requester's text; any other scheme, ``javascript:`` above all, is not followed)."""
    url = labels.get(LINK_LABEL, "")
    return url if url.startswith(("https://", "http://")) else None


def wait_reason(reason: WaitReason | None) -> str:
    return WAIT_REASONS.get(reason, reason.value.replace("_", " ")) if reason is not None else "not yet scheduled"


def placement(items: Iterable[PlacementItem]) -> str:
    """Where a lease runs, per host: ``node-1: GPU 0, GPU 1`` · ``MIG 3g.40gb on GPU 2`` · ``0.25 of GPU 3``."""
    by_host: dict[str, list[str]] = {}
    for item in sorted(items, key=lambda i: (i.host, i.gpu_index, i.mig_uuid or "")):
        if item.mig_profile is not None:
            part = f"MIG {item.mig_profile} on GPU {item.gpu_index}"
        elif item.milli < MILLI:
            memory = f" ({item.memory_mb:,} MB)" if item.memory_mb else ""
            part = f"{amount(GPU, item.milli)} of GPU {item.gpu_index}{memory}"
        else:
            part = f"GPU {item.gpu_index}"
        by_host.setdefault(item.host, []).append(part)
    return " · ".join(f"{host}: {', '.join(parts)}" for host, parts in by_host.items()) or "—"


def gpu_model(model: str) -> str:
    """``A100-SXM4-80GB`` for ``NVIDIA A100-SXM4-80GB``: the vendor prefix only costs room in a GPU tile."""
    return model.removeprefix("NVIDIA ").strip() or model
