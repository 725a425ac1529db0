"""``respools lease``: who holds what, and the admin's levers (release, preempt)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.text import Text

from respools.cli import app
from respools.cli.connection import TokenOption, UrlOption, api_errors, connect
from respools.cli.output import Format, OutputOption, console, labels, print_object, print_rows, state, vector, when

lease_app = typer.Typer(help="Leases: granted capacity, its placement and its borrowed part.")
app.add_typer(lease_app, name="lease", no_args_is_help=True)

LeaseId = Annotated[str, typer.Argument(help="lease id")]


def placement(lease: dict[str, Any]) -> str:
    """Where a lease sits: ``host-a:0,1`` or ``host-a:0/3g.40gb`` or ``host-a:2 (0.25)``."""
    items = (lease.get("placement") or {}).get("items") or []
    parts = []
    for item in items:
        where = f"{item['host']}:{item['gpu_index']}"
        if item.get("mig_profile"):
            where += f"/{item['mig_profile']}"
        elif item.get("milli", 1000) != 1000:
            where += f" ({item['milli'] / 1000:g})"
        parts.append(where)
    return ", ".join(parts) or "-"


def overrun_s(lease: dict[str, Any]) -> float | None:
    """Seconds an overdue lease has run past its preemption deadline, or ``None`` if it is not overdue."""
    if not lease.get("overdue_since") or not lease.get("preempt_deadline") or lease.get("state") != "preempting":
        return None
    deadline = datetime.fromisoformat(lease["preempt_deadline"])
    if deadline.tzinfo is None:
        deadline = deadline.replace(tzinfo=UTC)
    return max(0.0, (datetime.now(UTC) - deadline).total_seconds())


def lease_state(lease: dict[str, Any]) -> Text:
    """The state, and for an overdue lease how long it has overrun its deadline (its GPUs still held)."""
    shown = state(lease["state"])
    overrun = overrun_s(lease)
    if overrun is not None:
        shown.append(f" overdue {overrun:.0f}s", style="bold red")
    return shown


LEASE_COLUMNS: list[tuple[str, Any]] = [
    ("ID", lambda r: r["id"]),
    ("SUBJECT", lambda r: r["subject"]),
    ("POOL", lambda r: r["pool"]),
    ("RESOURCES", lambda r: vector(r["resources"])),
    ("BORROWED", lambda r: vector(r.get("borrowed"))),
    ("STATE", lease_state),
    ("PLACEMENT", placement),
    ("GRANTED", lambda r: when(r["granted_at"])),
    ("LABELS", lambda r: labels(r.get("labels"))),
]


@lease_app.command("list")
def list_leases(
    pool: Annotated[str | None, typer.Option(help="only this pool")] = None,
    subject: Annotated[str | None, typer.Option(help="only this subject")] = None,
    lease_state: Annotated[list[str] | None, typer.Option("--state", help="only these states, repeatable")] = None,
    live: Annotated[bool, typer.Option("--live", help="only granted, active or preempting leases")] = False,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 100,
    output: OutputOption = Format.TABLE,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Leases, newest first."""
    params: dict[str, Any] = {"limit": limit, "live": live}
    params |= {k: v for k, v in {"pool": pool, "subject": subject, "state": lease_state}.items() if v}
    client = connect(url, token)
    with api_errors():
        rows = client.get("/v1/leases", params=params)
    print_rows(rows, LEASE_COLUMNS, output, title="leases")


@lease_app.command("describe")
def describe_lease(
    lease_id: LeaseId, output: OutputOption = Format.TABLE, url: UrlOption = None, token: TokenOption = None
) -> None:
    """One lease: placement, borrowed part, expiry and, while preempting, its deadline."""
    client = connect(url, token)
    with api_errors():
        lease = client.get(f"/v1/leases/{lease_id}")
    if output == Format.TABLE:
        lease = lease | {"placement": placement(lease), "state": lease_state(lease)}
    print_object(lease, output, title=f"lease {lease_id}")


@lease_app.command("release")
def release_lease(
    lease_id: LeaseId, output: OutputOption = Format.TABLE, url: UrlOption = None, token: TokenOption = None
) -> None:
    """Release a lease (a holder that died; normally the step releases its own)."""
    client = connect(url, token)
    with api_errors():
        lease = client.post(f"/v1/leases/{lease_id}/release")
    _print_state(lease, output)


@lease_app.command("preempt")
def preempt_lease(
    lease_id: LeaseId,
    message: Annotated[str | None, typer.Option(help="shown to the holder")] = None,
    grace: Annotated[float | None, typer.Option(min=0, help="seconds of notice (default: the pool's)")] = None,
    output: OutputOption = Format.TABLE,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Give a lease preemption notice (admin): the holder checkpoints and its request is requeued."""
    body = {k: v for k, v in {"message": message, "grace_s": grace}.items() if v is not None}
    client = connect(url, token)
    with api_errors():
        lease = client.post(f"/v1/leases/{lease_id}/preempt", json=body)
    _print_state(lease, output)


def _print_state(lease: dict[str, Any], output: Format) -> None:
    if output == Format.JSON:
        print_object(lease, output, title="")
        return
    deadline = f", deadline {when(lease['preempt_deadline'])}" if lease.get("preempt_deadline") else ""
    console.print(Text.assemble(f"lease {lease['id']} is ", state(lease["state"]), deadline))
