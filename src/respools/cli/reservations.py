"""``respools reservation``: guaranteed extra capacity for a subject in a time window."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import typer

from respools.cli import app
from respools.cli.connection import TokenOption, UrlOption, amounts, api_errors, connect
from respools.cli.output import Format, OutputOption, console, print_object, print_rows, vector, when

reservation_app = typer.Typer(help="Reservations: extra reserved share for a subject during a window.")
app.add_typer(reservation_app, name="reservation", no_args_is_help=True)

ReservationId = Annotated[str, typer.Argument(help="reservation id (rsv_…)")]

_RELATIVE = re.compile(r"^\+(?P<n>\d+(?:\.\d+)?)(?P<unit>[smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def instant(text: str, option: str, now: datetime | None = None) -> str:
    """``now``, ``+90m``/``+2h``/``+1d`` from now, or ISO 8601 (no offset means UTC), as the API's ISO form."""
    now = now or datetime.now(UTC)
    if text == "now":
        return now.isoformat()
    if match := _RELATIVE.match(text):
        return (now + timedelta(seconds=float(match["n"]) * _UNITS[match["unit"]])).isoformat()
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise typer.BadParameter(f"{text!r}: use now, +2h (s, m, h, d) or ISO 8601", param_hint=option) from None
    return (at.replace(tzinfo=UTC) if at.tzinfo is None else at).isoformat()


_COLUMNS: list[tuple[str, Any]] = [
    ("ID", lambda r: r["id"]),
    ("SUBJECT", lambda r: r["subject"]),
    ("POOL", lambda r: r["pool"]),
    ("RESOURCES", lambda r: vector(r["resources"])),
    ("START", lambda r: when(r["start"])),
    ("END", lambda r: when(r["end"])),
    ("NOTE", lambda r: r.get("note") or "-"),
]


@reservation_app.command("list")
def list_reservations(
    pool: Annotated[str | None, typer.Option(help="only this pool")] = None,
    subject: Annotated[str | None, typer.Option(help="only this subject")] = None,
    include_past: Annotated[bool, typer.Option("--all", help="include windows that are over")] = False,
    output: OutputOption = Format.TABLE,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Current and upcoming reservations, by start."""
    params: dict[str, Any] = {k: v for k, v in {"pool": pool, "subject": subject}.items() if v}
    if include_past:
        params["include_past"] = True
    client = connect(url, token)
    with api_errors():
        rows = client.get("/v1/reservations", params=params)
    print_rows(rows, _COLUMNS, output, title="reservations")


@reservation_app.command("describe")
def describe_reservation(
    reservation_id: ReservationId, output: OutputOption = Format.TABLE, url: UrlOption = None, token: TokenOption = None
) -> None:
    """One reservation."""
    client = connect(url, token)
    with api_errors():
        reservation = client.get(f"/v1/reservations/{reservation_id}")
    print_object(reservation, output, title=f"reservation {reservation_id}")


@reservation_app.command("create")
def create_reservation(
    subject: Annotated[str, typer.Option(help="who gets the capacity")],
    pool: Annotated[str, typer.Option(help="in which pool")],
    resource: Annotated[list[str], typer.Option(help="key=amount, repeatable (gpu=4)")],
    start: Annotated[str, typer.Option(help="now, +2h, or ISO 8601")],
    end: Annotated[str, typer.Option(help="+6h, or ISO 8601 (after start)")],
    note: Annotated[str | None, typer.Option(help="why, for the people who look")] = None,
    output: OutputOption = Format.TABLE,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Reserve capacity for a subject during [start, end)."""
    body: dict[str, Any] = {
        "subject": subject,
        "pool": pool,
        "resources": amounts(resource, "--resource"),
        "start": instant(start, "--start"),
        "end": instant(end, "--end"),
    }
    if note:
        body["note"] = note
    client = connect(url, token)
    with api_errors():
        reservation = client.post("/v1/reservations", json=body)
    print_object(reservation, output, title=f"reservation {reservation['id']}")


@reservation_app.command("delete")
def delete_reservation(reservation_id: ReservationId, url: UrlOption = None, token: TokenOption = None) -> None:
    """Delete a reservation."""
    client = connect(url, token)
    with api_errors():
        client.delete(f"/v1/reservations/{reservation_id}")
    console.print(f"deleted reservation {reservation_id}")
