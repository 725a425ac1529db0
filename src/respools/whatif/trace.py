"""The trace format: one line per step, as JSON Lines (``.jsonl``) or CSV (``.csv``).

A trace is what was asked, not what happened: when a step was submitted, by whom, for what, how long
its work takes when it runs undisturbed, and how it behaves under preemption. The scheduler decides
the rest, so the same trace can be replayed against other definitions. Times are seconds from the
trace's start (``submit_s``), so a trace is independent of the day it was recorded; the simulator maps
second 0 to ``--start``.

CSV writes ``resources`` and ``pools`` as ``key=value;key=value`` and ``a;b``; JSON Lines writes them
as an object and a list. Every field has a bound, as in the API.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from respools.model import Name, ResourceVector, dump_resources

MAX_TRACE_SECONDS = 366 * 86400.0  # a year of history
MAX_RUNTIME_S = 90 * 86400.0

COLUMNS = (
    "id",
    "submit_s",
    "subject",
    "pools",
    "resources",
    "replicas",
    "runtime_s",
    "preemptible",
    "priority",
    "max_retries",
    "checkpoint_s",
)


class TraceJob(BaseModel):
    """One step of a trace. ``runtime_s`` is the work itself: a preempted step that checkpointed every
    ``checkpoint_s`` resumes from its last checkpoint, one that did not starts over."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(default="", max_length=200, pattern=r"^[^\x00]*$")
    submit_s: float = Field(ge=0, le=MAX_TRACE_SECONDS, allow_inf_nan=False)
    subject: Name
    pools: tuple[Name, ...] | None = Field(default=None, max_length=32)
    resources: ResourceVector
    replicas: int = Field(default=1, ge=1, le=1024)
    runtime_s: float = Field(gt=0, le=MAX_RUNTIME_S, allow_inf_nan=False)
    preemptible: bool = False
    priority: int = Field(default=0, ge=-1_000_000, le=1_000_000)
    max_retries: int = Field(default=0, ge=0, le=100)
    checkpoint_s: float | None = Field(default=None, gt=0, le=MAX_RUNTIME_S, allow_inf_nan=False)

    @field_validator("resources")
    @classmethod
    def _asks_for_something(cls, value: dict[str, int]) -> dict[str, int]:
        if not value:
            raise ValueError("a step must ask for at least one resource, e.g. gpu=1")
        return value

    def wire(self) -> dict[str, Any]:
        """The job as JSON Lines writes it (resources in wire units)."""
        return self.model_dump(mode="json", exclude_none=True)


class TraceError(ValueError):
    """A trace line that cannot be read; says which line and which field."""


def read_trace(path: Path) -> list[TraceJob]:
    """Every job of the file, sorted by submission time (stable for equal times)."""
    with path.open(newline="") as handle:
        rows = _csv_rows(handle) if path.suffix.lower() == ".csv" else _jsonl_rows(handle)
        jobs = []
        for line, row in rows:
            try:
                jobs.append(TraceJob.model_validate(row))
            except ValidationError as exc:
                first = exc.errors()[0]
                field = ".".join(str(part) for part in first["loc"]) or "line"
                raise TraceError(f"{path}:{line}: {field}: {first['msg']}") from None
    for index, job in enumerate(jobs):
        if not job.id:
            jobs[index] = job.model_copy(update={"id": f"job-{index + 1}"})
    return sorted(jobs, key=lambda job: job.submit_s)


def write_trace(jobs: Iterable[TraceJob], path: Path) -> int:
    """Write ``jobs`` in the format the suffix names; returns how many were written."""
    count = 0
    with path.open("w", newline="") as handle:
        if path.suffix.lower() == ".csv":
            writer = csv.DictWriter(handle, fieldnames=COLUMNS)
            writer.writeheader()
            for job in jobs:
                writer.writerow(_csv_row(job))
                count += 1
        else:
            for job in jobs:
                handle.write(json.dumps(job.wire(), separators=(",", ":")) + "\n")
                count += 1
    return count


def _jsonl_rows(handle: Iterable[str]) -> Iterable[tuple[int, Any]]:
    for line, text in enumerate(handle, 1):
        if not text.strip():
            continue
        try:
            yield line, json.loads(text)
        except json.JSONDecodeError as exc:
            raise TraceError(f"line {line}: not JSON ({exc.msg})") from None


def _csv_rows(handle: Iterable[str]) -> Iterable[tuple[int, dict[str, Any]]]:
    reader = csv.DictReader(handle)
    unknown = set(reader.fieldnames or ()) - set(COLUMNS)
    if unknown:
        raise TraceError(f"unknown CSV columns {sorted(unknown)}; the columns are {', '.join(COLUMNS)}")
    for line, row in enumerate(reader, 2):
        out: dict[str, Any] = {k: v for k, v in row.items() if v not in ("", None)}
        if "resources" in out:
            out["resources"] = _pairs(out["resources"], line)
        if "pools" in out:
            out["pools"] = [p for p in out["pools"].split(";") if p]
        if "preemptible" in out:
            out["preemptible"] = out["preemptible"].strip().lower() in ("1", "true", "yes")
        yield line, out


def _pairs(text: str, line: int) -> dict[str, str]:
    out = {}
    for part in filter(None, text.split(";")):
        key, sep, value = part.partition("=")
        if not sep:
            raise TraceError(f"line {line}: resources: write key=value;key=value, got {part!r}")
        out[key.strip()] = value.strip()
    return out


def _csv_row(job: TraceJob) -> dict[str, Any]:
    row = job.model_dump(mode="json")
    row["resources"] = ";".join(f"{k}={v:g}" for k, v in dump_resources(job.resources).items())
    row["pools"] = ";".join(job.pools or ())
    row["checkpoint_s"] = "" if job.checkpoint_s is None else job.checkpoint_s
    return row
