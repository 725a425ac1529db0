"""What the demo prints at the end: one row per step, and the service's own event log, which tells the
same story from the scheduler's side (grants, the borrowed part, the preemption and its reason, the
requeue, the releases)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from demo_steps import StepRecord
from rich.console import Console
from rich.table import Table
from rich.text import Text

from respools.client import Client

EVENT_STYLES = {
    "granted": "green",
    "preempting": "bold red",
    "preempted": "red",
    "requeued": "yellow",
    "released": "dim",
}


def steps_table(records: list[StepRecord]) -> Table:
    table = Table(title="What happened", title_justify="left", header_style="bold")
    for column in ("step", "asked for", "attempts", "borrowed", "preempted", "resumed", "result"):
        table.add_column(column)
    for r in records:
        table.add_row(
            f"{r.team}/{r.step}",
            r.asked,
            str(r.attempts),
            f"{r.borrowed_gpus:g} GPU" if r.borrowed_gpus else "-",
            ", ".join(r.preemptions) or "-",
            f"from epoch {r.resumed_from}" if r.resumed_from is not None else "-",
            Text(r.error or r.result, style="red" if r.error else "green"),
        )
    return table


def event_log(client: Client) -> list[dict[str, Any]]:
    """Everything the service logged (it is the demo's own, fresh service)."""
    events: list[dict[str, Any]] = client.get("/v1/events", params={"limit": 1000})
    return events


def events_table(events: list[dict[str, Any]]) -> Table:
    table = Table(title="Event log (GET /v1/events)", title_justify="left", header_style="bold")
    for column in ("id", "at", "kind", "subject", "message"):
        table.add_column(column)
    start = datetime.fromisoformat(events[0]["at"]) if events else None
    for event in events:
        offset = (datetime.fromisoformat(event["at"]) - start).total_seconds() if start else 0.0
        kind = event["kind"]
        table.add_row(
            str(event["id"]),
            f"+{offset:.1f}s",
            Text(kind, style=EVENT_STYLES.get(kind, "")),
            event.get("subject") or "-",
            Text(event["message"]),
        )
    return table


def print_report(console: Console, records: list[StepRecord], events: list[dict[str, Any]]) -> None:
    console.print()
    console.print(steps_table(records))
    console.print()
    console.print(events_table(events))
