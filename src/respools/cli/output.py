"""How commands print: a rich table for people by default, the API's JSON with ``--output json`` for
scripts (exactly what the server answered, so ``jq`` filters written against the API docs work)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

PIPED_WIDTH = 240
"""Table width when stdout is not a terminal (``| grep``, ``> file``): wide enough that ids are never cut."""

console = Console(highlight=False)
errors = Console(stderr=True, highlight=False)
if not console.is_terminal and "COLUMNS" not in os.environ:
    console.width = PIPED_WIDTH


class Format(StrEnum):
    TABLE = "table"
    JSON = "json"


OutputOption = Annotated[
    Format, typer.Option("--output", "-o", help="table for people, json for scripts", case_sensitive=False)
]


def print_json(data: Any) -> None:
    """JSON on stdout, plain (no colour codes, whatever the terminal), one document per call."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()


def print_json_line(data: Any) -> None:
    """One compact JSON document per line (JSON Lines), for streams such as ``events --follow``."""
    sys.stdout.write(json.dumps(data, default=str) + "\n")
    sys.stdout.flush()


Column = tuple[str, Callable[[Mapping[str, Any]], "str | Text"]]
"""A table column: its header and how to render a row's cell. Strings are shown as they are (data from
the server is never read as rich markup: ``[apply:ci]`` is text); styled cells are :class:`Text`."""


def _text(value: str | Text) -> Text:
    return value if isinstance(value, Text) else Text(value)


def print_rows(data: Sequence[Mapping[str, Any]], columns: Sequence[Column], output: Format, *, title: str) -> None:
    """A list answer: a table (or "no …" when empty) or its JSON."""
    if output == Format.JSON:
        print_json(list(data))
        return
    if not data:
        console.print(f"[dim]no {title}[/dim]")
        return
    table = Table(title=None, show_edge=False, header_style="bold")
    rows = [[_text(render(row)) for _, render in columns] for row in data]
    for i, (header, _) in enumerate(columns):
        if i == 0:  # the id or name people copy into the next command: never wrapped or cut
            table.add_column(header, no_wrap=True, min_width=max(len(r[0].plain) for r in rows))
        else:
            table.add_column(header)
    for cells in rows:
        table.add_row(*cells)
    console.print(table)


def print_object(data: Mapping[str, Any], output: Format, *, title: str, fields: Iterable[str] | None = None) -> None:
    """One object: two columns of field and value (nested values as compact JSON), or its JSON."""
    if output == Format.JSON:
        print_json(data)
        return
    table = Table(title=title, title_justify="left", show_header=False, show_edge=False, box=None)
    table.add_column(style="bold")
    table.add_column()
    for name in fields or data.keys():
        if name in data:
            table.add_row(name, _text(cell(data[name])))
    console.print(table)


def cell(value: Any) -> str | Text:
    """A value as a table shows it: vectors as ``gpu 2, mcpu 4000``, nothing as ``-``."""
    if isinstance(value, Text):
        return value
    if value is None or value == "" or value == [] or value == {}:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        if all(isinstance(v, int | float) and not isinstance(v, bool) for v in value.values()):
            return vector(value)
        return ", ".join(f"{k}={cell(v)}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(str(cell(v)) for v in value)
    return str(value)


def vector(value: Mapping[str, Any] | None) -> str:
    """A wire resource vector for people: ``gpu 2, mcpu 4000``."""
    if not value:
        return "-"
    return ", ".join(f"{key} {amount:g}" for key, amount in sorted(value.items()))


def labels(value: Mapping[str, Any] | None) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted((value or {}).items())) or "-"


def when(value: str | None) -> str:
    """An API timestamp as local wall time with its age: ``14:03:12 (2m ago)``."""
    if not value:
        return "-"
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        return value
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    seconds = (datetime.now(UTC) - at).total_seconds()
    local = at.astimezone()
    stamp = local.strftime("%H:%M:%S") if abs(seconds) < 86400 else local.strftime("%Y-%m-%d %H:%M")
    return f"{stamp} ({age(seconds)})"


def age(seconds: float) -> str:
    future = seconds < 0
    seconds = abs(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            text = f"{int(seconds // size)}{unit}"
            break
    else:
        text = f"{int(seconds)}s"
    return f"in {text}" if future else f"{text} ago"


STATE_STYLES = {
    "pending": "yellow",
    "granted": "green",
    "active": "green",
    "preempting": "bold red",
    "preempted": "red",
    "released": "dim",
    "rejected": "red",
    "cancelled": "dim",
    "expired": "magenta",
}


def state(value: str | None) -> Text:
    """A request or lease state, coloured by what it means for the holder."""
    if not value:
        return Text("-")
    return Text(value, style=STATE_STYLES.get(value, ""))
