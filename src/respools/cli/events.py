"""``respools events``: the log of grants, preemptions, requeues, expiries and rejections.

``--follow`` polls ``GET /v1/events?after=<last id>`` once a second through the SDK client rather than
opening the server-sent event stream: one HTTP layer for the whole CLI, and a second of latency is
plenty for a terminal."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from respools.cli import app
from respools.cli.connection import TokenOption, UrlOption, api_errors, connect
from respools.cli.output import Format, OutputOption, console, print_json_line, print_rows, when
from respools.model import EventKind

events_app = typer.Typer(help="Events: grants, preemptions, requeues, expiries, rejections.")
app.add_typer(events_app, name="events", no_args_is_help=True)

FOLLOW_INTERVAL_S = 1.0

EVENT_COLUMNS: list[tuple[str, Any]] = [
    ("ID", lambda r: str(r["id"])),
    ("AT", lambda r: when(r["at"])),
    ("KIND", lambda r: r["kind"]),
    ("POOL", lambda r: r.get("pool") or "-"),
    ("SUBJECT", lambda r: r.get("subject") or "-"),
    ("MESSAGE", lambda r: r["message"]),
]


def line(event: dict[str, Any]) -> str:
    """One event on one line, for ``--follow``."""
    where = "/".join(filter(None, [event.get("pool"), event.get("subject")]))
    return f"{event['id']:>6}  {when(event['at'])}  {event['kind']:<10} {where:<24} {event['message']}"


@events_app.command("list")
def list_events(
    after: Annotated[int, typer.Option(min=0, help="only events after this id")] = 0,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="at most this many (oldest first)")] = 100,
    kind: Annotated[list[EventKind] | None, typer.Option(help="only these kinds, repeatable")] = None,
    pool: Annotated[str | None, typer.Option(help="only this pool")] = None,
    subject: Annotated[str | None, typer.Option(help="only this subject")] = None,
    request: Annotated[str | None, typer.Option("--request", help="only this request")] = None,
    lease: Annotated[str | None, typer.Option("--lease", help="only this lease")] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="keep printing new events (Ctrl-C stops)")] = False,
    output: OutputOption = Format.TABLE,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Events after an id, oldest first; with --follow, then every new one as it happens."""
    params: dict[str, Any] = {"after": after, "limit": limit}
    filters = {"kind": [k.value for k in kind or []], "pool": pool, "subject": subject}
    params |= {k: v for k, v in (filters | {"request_id": request, "lease_id": lease}).items() if v}
    client = connect(url, token)
    with api_errors():
        page: list[dict[str, Any]] = client.get("/v1/events", params=params)
    if not follow:
        print_rows(page, EVENT_COLUMNS, output, title="events")
        return
    try:
        with api_errors():
            while True:
                for event in page:
                    if output == Format.JSON:
                        print_json_line(event)
                    else:
                        console.print(line(event), soft_wrap=True, markup=False)
                    params["after"] = event["id"]
                if len(page) < limit:
                    time.sleep(FOLLOW_INTERVAL_S)
                page = client.get("/v1/events", params=params)
    except KeyboardInterrupt:
        raise typer.Exit(0) from None
