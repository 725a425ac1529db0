"""The plan of ``respools apply`` for people (a rich diff) and for scripts (JSON)."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.text import Text

from respools.definitions import MISSING, Action, Item, Kind, Plan, Problem, Source

SIGNS = {
    Action.CREATE: ("+", "green"),
    Action.UPDATE: ("~", "yellow"),
    Action.REPLACE: ("±", "yellow"),
    Action.DELETE: ("-", "red"),
}


def _value(value: Any) -> str:
    if value is MISSING:
        return "(absent)"
    if isinstance(value, str):
        return value
    if isinstance(value, float):
        return f"{value:g}"
    return json.dumps(value)


def summary(item: Item) -> str:
    """One line that identifies what is created or deleted without printing a whole inventory."""
    doc = item.document
    if item.kind == Kind.POOL:
        inventory = doc.get("inventory")
        if inventory is not None:
            gpus = sum(len(host.get("gpus", [])) for host in inventory)
            size = f"{len(inventory)} host(s), {gpus} GPU(s)"
            extra = f"; also {_vector(doc.get('capacity'))}" if doc.get("capacity") else ""
            return f"stack {doc.get('stack')}, inventory of {size}{extra}"
        return f"stack {doc.get('stack')}, capacity {_vector(doc.get('capacity'))}"
    if item.kind == Kind.POLICY:
        limit = _vector(doc.get("limit")) if doc.get("limit") else "pool total"
        return (
            f"reserved {_vector(doc.get('reserved'))}, limit {limit}, "
            f"priority {doc.get('priority')}, weight {doc.get('weight'):g}"
        )
    if item.kind == Kind.RESERVATION:
        window = f"{doc['start']} → {doc['end']}"
        return f"{doc.get('subject')} on {doc.get('pool')}: {_vector(doc.get('resources'))}, {window}"
    if item.kind == Kind.TOKEN:
        subject = f" for {doc['subject']}" if doc.get("subject") else ""
        return f"role {doc.get('role')}{subject}"
    return doc.get("display_name") or ""


def _vector(value: Any) -> str:
    if not value:
        return "nothing"
    return ", ".join(f"{k} {v:g}" for k, v in value.items())


def render_plan(console: Console, plan: Plan, target: str, *, dry_run: bool) -> None:
    verb = "would" if dry_run else "will"
    if plan.empty:
        console.print(f"[green]No changes.[/green] {target} matches the file ({len(plan.unchanged)} object(s)).")
        return
    console.print(f"[bold]Changes {verb} be made on {target}:[/bold]")
    for change in plan.changes:
        sign, style = SIGNS[change.action]
        item = change.desired or change.current
        assert item is not None
        line = Text(f"  {sign} ", style=style)
        line.append(f"{change.kind.value} ", style="bold")
        line.append(change.key, style=f"bold {style}")
        if change.action in (Action.CREATE, Action.DELETE):
            line.append(f"  {summary(item)}", style="dim")
        if change.action == Action.REPLACE:
            line.append("  (the API cannot edit it: deleted and created again", style="dim")
            line.append(", with a new secret)" if change.kind == Kind.TOKEN else ")", style="dim")
        if change.action == Action.DELETE and change.kind == Kind.SUBJECT:
            line.append("  (with its policies, reservations and tokens)", style="dim")
        if change.action == Action.DELETE and change.kind == Kind.POOL:
            line.append("  (with its policies, reservations and host reports)", style="dim")
        console.print(line)
        for field in change.fields:
            detail = Text(f"      {field.field}: ")
            detail.append(_value(field.before), style="red")
            detail.append(" → ")
            detail.append(_value(field.after), style="green")
            console.print(detail)
    counts = ", ".join(f"{plan.count(a)} to {a.value}" for a in Action if plan.count(a))
    console.print(f"{counts}; {len(plan.unchanged)} unchanged.")


def plan_json(plan: Plan) -> list[dict[str, Any]]:
    return [
        {
            "action": change.action.value,
            "kind": change.kind.value,
            "name": change.key,
            "fields": [
                {
                    "field": f.field,
                    "before": None if f.before is MISSING else f.before,
                    "after": None if f.after is MISSING else f.after,
                }
                for f in change.fields
            ],
        }
        for change in plan.changes
    ]


def render_problems(console: Console, source: Source | None, problems: list[Problem]) -> None:
    """Each problem as ``file:line:col: field: message`` with the offending line of the file under it."""
    lines = source.text.splitlines() if source is not None else []
    for problem in problems:
        console.print(Text(str(problem), style="red"), soft_wrap=True)
        if problem.position is not None and 0 < problem.position.line <= len(lines):
            text = lines[problem.position.line - 1]
            console.print(Text(f"  {problem.position.line:>4} | {text}", style="dim"), soft_wrap=True)
            console.print(Text("       | " + " " * (problem.position.column - 1) + "^", style="red"))
