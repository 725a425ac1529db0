"""``respools policy``: who may use which pool, and how much.

A policy is keyed by (subject, pool): ``create`` replaces an existing one, as the API's PUT does."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from respools.cli import app
from respools.cli.connection import TokenOption, UrlOption, amounts, api_errors, connect
from respools.cli.output import Format, OutputOption, console, print_object, print_rows, vector

policy_app = typer.Typer(help="Policies: a subject's reserved share, limit, priority and weight in a pool.")
app.add_typer(policy_app, name="policy", no_args_is_help=True)

Subject = Annotated[str, typer.Argument(help="subject name")]
Pool = Annotated[str, typer.Argument(help="pool name")]

_POLICY_COLUMNS: list[tuple[str, Any]] = [
    ("SUBJECT", lambda r: r["subject"]),
    ("POOL", lambda r: r["pool"]),
    ("RESERVED", lambda r: vector(r["reserved"])),
    ("LIMIT", lambda r: vector(r["limit"]) if r.get("limit") is not None else "pool total"),
    ("PRIORITY", lambda r: str(r["priority"])),
    ("WEIGHT", lambda r: f"{r['weight']:g}"),
]


@policy_app.command("list")
def list_policies(
    pool: Annotated[str | None, typer.Option(help="only this pool")] = None,
    subject: Annotated[str | None, typer.Option(help="only this subject")] = None,
    output: OutputOption = Format.TABLE,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Policies, by pool and subject."""
    params = {k: v for k, v in {"pool": pool, "subject": subject}.items() if v is not None}
    client = connect(url, token)
    with api_errors():
        rows = client.get("/v1/policies", params=params)
    print_rows(rows, _POLICY_COLUMNS, output, title="policies")


@policy_app.command("describe")
def describe_policy(
    subject: Subject, pool: Pool, output: OutputOption = Format.TABLE, url: UrlOption = None, token: TokenOption = None
) -> None:
    """One subject's policy on one pool."""
    client = connect(url, token)
    with api_errors():
        policy = client.get(f"/v1/policies/{pool}/{subject}")
    print_object(policy, output, title=f"policy of {subject} on {pool}")


@policy_app.command("create")
def create_policy(
    subject: Subject,
    pool: Pool,
    reserved: Annotated[list[str] | None, typer.Option(help="guaranteed share, key=amount, repeatable")] = None,
    limit: Annotated[list[str] | None, typer.Option(help="hard cap, borrowing included, key=amount")] = None,
    priority: Annotated[int, typer.Option(help="higher wins across subjects")] = 0,
    weight: Annotated[float, typer.Option(min=0, help="share of idle capacity among borrowers")] = 1.0,
    output: OutputOption = Format.TABLE,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Create (or replace) SUBJECT's policy on POOL."""
    body: dict[str, Any] = {
        "subject": subject,
        "pool": pool,
        "reserved": amounts(reserved, "--reserved"),
        "priority": priority,
        "weight": weight,
    }
    if limit:
        body["limit"] = amounts(limit, "--limit")
    client = connect(url, token)
    with api_errors():
        policy = client.put(f"/v1/policies/{pool}/{subject}", json=body)
    print_object(policy, output, title=f"policy of {subject} on {pool}")


@policy_app.command("delete")
def delete_policy(subject: Subject, pool: Pool, url: UrlOption = None, token: TokenOption = None) -> None:
    """Delete a policy; leases it granted run on."""
    client = connect(url, token)
    with api_errors():
        client.delete(f"/v1/policies/{pool}/{subject}")
    console.print(f"deleted the policy of {subject} on {pool}")
