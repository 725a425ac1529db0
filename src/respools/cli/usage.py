"""``respools usage``: who used how many GPU-hours (and every other pool key), in share and borrowed,
and how much was held by leases that ended preempted; from ``GET /v1/usage``.

The table and CSV have one line per group and resource key (long form), so a pool with ``mcpu`` or
``memory`` keys needs no other columns; ``--format json`` prints the API's answer as it is."""

from __future__ import annotations

import csv
import re
import sys
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any

import typer

from respools.cli import app
from respools.cli.connection import TokenOption, UrlOption, api_errors, connect
from respools.cli.output import Format, print_json, print_rows

AGO = re.compile(r"^(\d+)([dhm])$")
UNITS = {"d": "days", "h": "hours", "m": "minutes"}
KINDS = ("in_share", "borrowed", "preempted", "lost", "total")


class UsageFormat(StrEnum):
    TABLE = "table"
    CSV = "csv"
    JSON = "json"


def when(value: str | None) -> str | None:
    """``7d``, ``12h`` or ``30m`` ago, or an ISO 8601 time as it is (the server checks it)."""
    if value is None:
        return None
    match = AGO.match(value.strip())
    if match is None:
        return value
    amount, unit = match.groups()
    return (datetime.now(UTC) - timedelta(**{UNITS[unit]: int(amount)})).isoformat()


def long_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per group and key: subject, pool, bucket, key and the key-seconds of each kind."""
    rows = []
    for row in report["rows"]:
        for key in sorted(row["total"].keys() | row["preempted"].keys()):
            line = {"subject": row.get("subject"), "pool": row.get("pool"), "bucket": row.get("bucket"), "key": key}
            rows.append(line | {f"{kind}_s": row.get(kind, {}).get(key, 0.0) for kind in KINDS})
    return rows


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:,.2f}"


COLUMNS: list[tuple[str, Any]] = [
    ("SUBJECT", lambda r: r["subject"] or "*"),
    ("POOL", lambda r: r["pool"] or "*"),
    ("BUCKET", lambda r: (r["bucket"] or "*")[:16].replace("T", " ")),
    ("KEY", lambda r: r["key"]),
    ("IN SHARE (h)", lambda r: _hours(r["in_share_s"])),
    ("BORROWED (h)", lambda r: _hours(r["borrowed_s"])),
    ("PREEMPTED (h)", lambda r: _hours(r["preempted_s"])),
    ("LOST (h)", lambda r: _hours(r["lost_s"])),
    ("TOTAL (h)", lambda r: _hours(r["total_s"])),
]


@app.command("usage")
def usage(
    since: Annotated[
        str | None, typer.Option(help="ISO time or 7d/12h/30m ago (default: 30 days before until)")
    ] = None,
    until: Annotated[str | None, typer.Option(help="ISO time or 7d/12h/30m ago (default: now)")] = None,
    by: Annotated[str, typer.Option(help="comma-separated: subject, pool, day or hour")] = "subject,pool",
    subject: Annotated[str | None, typer.Option(help="only this subject")] = None,
    output: Annotated[
        UsageFormat, typer.Option("--format", "--output", "-o", help="table, csv or json", case_sensitive=False)
    ] = UsageFormat.TABLE,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Key-hours per subject, pool and day/hour: in share, borrowed, and held by preempted leases."""
    params = {"since": when(since), "until": when(until), "by": by, "subject": subject}
    client = connect(url, token)
    with api_errors():
        report: dict[str, Any] = client.get("/v1/usage", params={k: v for k, v in params.items() if v})
    if output == UsageFormat.JSON:
        print_json(report)
        return
    rows = long_rows(report)
    if output == UsageFormat.CSV:
        writer = csv.DictWriter(sys.stdout, fieldnames=["subject", "pool", "bucket", "key", *(f"{k}_s" for k in KINDS)])
        writer.writeheader()
        writer.writerows(rows)
        return
    print_rows(rows, COLUMNS, Format.TABLE, title="usage in this window")
