"""``respools apply -f pools.yaml [--dry-run] [--prune]``: make the service hold what the file defines.

Read and validate the file (every problem located at its line), fetch the server's pools, subjects,
policies, reservations and tokens, plan the changes (:mod:`respools.definitions`), show them, and carry
them out in the plan's order. A second apply of the same file finds nothing to change. A refusal by the
server stops the apply there and is reported at the line of the field it names; what was applied before
stays applied, and running the apply again after fixing the file converges.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from respools.cli import app
from respools.cli.connection import TokenOption, UrlOption, api_errors, connect
from respools.cli.output import Format, OutputOption, console, errors, print_json
from respools.cli.plan_view import plan_json, render_plan, render_problems
from respools.client.errors import ApiError
from respools.definitions import (
    Action,
    Change,
    DefinitionFileError,
    Kind,
    Plan,
    Problem,
    ServerState,
    Source,
    check_references,
    current_items,
    desired_items,
    make_plan,
    parse_field,
    request_body,
    validate,
)

if TYPE_CHECKING:
    from respools.client import Client
    from respools.model import PoolSpec


def fetch_state(client: Client) -> ServerState:
    return ServerState(
        pools=client.get("/v1/pools"),
        subjects=client.get("/v1/subjects"),
        policies=client.get("/v1/policies"),
        reservations=client.get("/v1/reservations"),
        tokens=client.get("/v1/tokens"),
    )


def _surviving(state: ServerState, plan_prune: bool) -> tuple[set[str], set[str]]:
    """Pools and subjects on the server that are still there after the apply."""
    if plan_prune:
        return set(), set()
    return {p["name"] for p in state.pools}, {s["name"] for s in state.subjects}


def _object_path(change: Change) -> str:
    item = change.desired or change.current
    assert item is not None
    if change.kind == Kind.POLICY:
        subject, pool = change.key.split("@", 1)
        return f"/v1/policies/{pool}/{subject}"
    if change.kind in (Kind.RESERVATION, Kind.TOKEN):
        return f"/v1/{change.kind.value}s/{change.current.ref if change.current else ''}"
    return f"/v1/{change.kind.value}s/{change.key}"


def execute(client: Client, change: Change) -> dict[str, Any] | None:
    """Carry out one change; returns an issued token (with its secret) when one was created."""
    path = _object_path(change)
    if change.action in (Action.DELETE, Action.REPLACE):
        client.delete(path)
    if change.action == Action.DELETE:
        return None
    assert change.desired is not None
    body = request_body(change.desired, change.current)
    if change.kind == Kind.RESERVATION:
        client.post("/v1/reservations", json=body)
        return None
    if change.kind == Kind.TOKEN:
        issued: dict[str, Any] = client.post("/v1/tokens", json=body)
        return {"name": change.key, "id": issued["id"], "subject": issued.get("subject"), "token": issued["token"]}
    client.put(path, json=body)
    return None


def _refusal(source: Source, change: Change, exc: ApiError) -> Problem:
    """A server refusal placed at the line of the field it names (or of the entry, or the file)."""
    item = change.desired
    verb = {Action.CREATE: "creating", Action.UPDATE: "updating", Action.REPLACE: "replacing"}.get(
        change.action, "deleting"
    )
    message = f"{verb} {change.kind.value} {change.key!r} was refused ({exc.status}): {exc.detail}"
    if item is None or item.path is None:
        return Problem(source.file, (), message, None)
    at = parse_field(exc.field) if exc.field else []
    return source.problem([*item.path, *at], message)


def capacity_warnings(pools: list[PoolSpec]) -> list[str]:
    """What each pool's backend says about capacity the stack may not give (Vertex quota); a backend that
    cannot be loaded or asked is a warning too, never a failed apply."""
    from respools.backends import get_backend

    warnings: list[str] = []
    for pool in pools:
        try:
            warnings += get_backend(pool.stack).capacity_warnings(pool)
        except Exception as exc:  # quota APIs and credentials fail in many ways; apply goes on
            warnings.append(f"pool {pool.name!r}: could not check its capacity on stack {pool.stack!r}: {exc}")
    return warnings


def _read(file: str) -> Source:
    if file == "-":
        return Source.parse(sys.stdin.read(), "<stdin>")
    return Source.read(Path(file))


@dataclass
class Applied:
    """What an apply did: the plan it followed and the tokens it issued (with their secrets)."""

    plan: Plan
    tokens: list[dict[str, Any]] = field(default_factory=list)


def apply_file(
    file: str,
    client: Client,
    *,
    dry_run: bool = False,
    prune: bool = False,
    output: Format = Format.TABLE,
    show_secrets: bool = True,
) -> Applied:
    """The whole apply, for the command and for programs (the demo) that want the issued tokens back.

    Problems in the file or refusals by the server are printed (located in the file) and end the
    command with status 1 (:class:`typer.Exit`)."""
    source: Source | None = None
    try:
        source = _read(file)
        doc = validate(source)
    except DefinitionFileError as exc:
        render_problems(errors, source, exc.problems)
        raise typer.Exit(1) from None
    with api_errors():
        state = fetch_state(client)
    pools, subjects = _surviving(state, prune)
    pools |= {p.name for p in doc.pools}
    subjects |= {s.name for s in doc.subjects}
    problems = check_references(source, doc, pools, subjects)
    if problems:
        render_problems(errors, source, problems)
        raise typer.Exit(1)
    for warning in capacity_warnings(doc.pools):
        errors.print(f"[yellow]warning:[/yellow] {escape(warning)}", soft_wrap=True)
    plan = make_plan(desired_items(doc), current_items(state), prune=prune)
    if output == Format.TABLE:
        render_plan(console, plan, client.url, dry_run=dry_run)
    if dry_run:
        if output == Format.JSON:
            print_json({"dry_run": True, "changes": plan_json(plan), "unchanged": len(plan.unchanged)})
        return Applied(plan)
    applied = Applied(plan, _carry_out(client, source, plan))
    _report(applied, output, show_secrets)
    return applied


@app.command("apply")
def apply(
    file: Annotated[str, typer.Option("--file", "-f", help="definitions file (YAML); - reads stdin")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="show the changes, make none")] = False,
    prune: Annotated[
        bool,
        typer.Option(
            "--prune",
            help="also delete pools, subjects and policies the file does not name, and the reservations and "
            "tokens an earlier apply made that it no longer names",
        ),
    ] = False,
    output: OutputOption = Format.TABLE,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Make the service hold the pools, subjects, policies, reservations and tokens of a file.

    Creates and updates (with --prune also deletes) so that the service matches the file; applying the
    same file again changes nothing. Problems are reported at the file's line and field."""
    apply_file(file, connect(url, token), dry_run=dry_run, prune=prune, output=output)


def _carry_out(client: Client, source: Source, plan: Plan) -> list[dict[str, Any]]:
    issued: list[dict[str, Any]] = []
    with api_errors():  # unreachable service and the like; refusals are placed in the file below
        for done, change in enumerate(plan.changes):
            try:
                token = execute(client, change)
            except ApiError as exc:
                render_problems(errors, source, [_refusal(source, change, exc)])
                errors.print(
                    f"{done} of {len(plan.changes)} change(s) were applied before this one; "
                    "fix the file and apply again."
                )
                raise typer.Exit(1) from None
            if token is not None:
                issued.append(token)
    return issued


def _report(applied: Applied, output: Format, show_secrets: bool) -> None:
    plan = applied.plan
    if output == Format.JSON:
        tokens = applied.tokens if show_secrets else [t | {"token": None} for t in applied.tokens]
        print_json({"dry_run": False, "changes": plan_json(plan), "unchanged": len(plan.unchanged), "tokens": tokens})
        return
    if not plan.empty:
        console.print(f"[green]Applied {len(plan.changes)} change(s).[/green]")
    for token in applied.tokens:
        secret = f"[bold]{token['token']}[/bold]  [dim]shown once: store it now[/dim]" if show_secrets else "issued"
        console.print(f"token [bold]{token['name']}[/bold] ({token['id']}): {secret}", soft_wrap=True)
