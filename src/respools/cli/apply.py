"""``respools apply -f pools.yaml [--dry-run] [--prune]``: make the service hold what the file defines.

Read and validate the file (every problem located at its line), fetch the server's pools, subjects,
policies, reservations and tokens, plan the changes (:mod:`respools.definitions`), show them, and carry
them out in the plan's order, all in one call the service applies in one transaction. A second apply of
the same file finds nothing to change. A refusal by the server changes nothing at all and is reported at
the line of the field it names.
"""

from __future__ import annotations

import re
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


_PUT = {Kind.POOL: "put_pool", Kind.SUBJECT: "put_subject", Kind.POLICY: "put_policy"}
_CREATE = {Kind.RESERVATION: "create_reservation", Kind.TOKEN: "issue_token"}
_DELETE = {
    Kind.POOL: "delete_pool",
    Kind.SUBJECT: "delete_subject",
    Kind.POLICY: "delete_policy",
    Kind.RESERVATION: "delete_reservation",
    Kind.TOKEN: "revoke_token",
}


def operations(change: Change) -> list[dict[str, Any]]:
    """The change as the service's atomic apply takes it (``POST /v1/definitions/apply``): a replacement
    is a deletion and a creation."""
    ops: list[dict[str, Any]] = []
    if change.action in (Action.DELETE, Action.REPLACE):
        ops.append(_deletion(change))
    if change.action == Action.DELETE:
        return ops
    assert change.desired is not None
    body = request_body(change.desired, change.current)
    ops.append({"op": _PUT.get(change.kind) or _CREATE[change.kind], "spec": body})
    return ops


def _deletion(change: Change) -> dict[str, Any]:
    op = _DELETE[change.kind]
    if change.kind == Kind.POLICY:
        subject, pool = change.key.split("@", 1)
        return {"op": op, "pool": pool, "subject": subject}
    if change.kind in (Kind.RESERVATION, Kind.TOKEN):
        assert change.current is not None and change.current.ref is not None
        return {"op": op, "id": change.current.ref}
    return {"op": op, "name": change.key}


_CHANGE_FIELD = re.compile(r"^changes\[(?P<index>\d+)\](?:\.spec)?\.?(?P<field>.*)$")


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
    """The whole plan in one call, which the service applies in one transaction: a refusal leaves the
    service as it was, and is placed at the line of the field it names."""
    ops: list[dict[str, Any]] = []
    owner: list[Change] = []  # the plan change each op carries out
    for change in plan.changes:
        for op in operations(change):
            ops.append(op)
            owner.append(change)
    if not ops:
        return []
    with api_errors():  # unreachable service and the like; refusals are placed in the file below
        try:
            applied: dict[str, Any] = client.post("/v1/definitions/apply", json={"changes": ops})
        except ApiError as exc:
            match = _CHANGE_FIELD.match(exc.field or "")
            change = owner[int(match.group("index"))] if match else plan.changes[0]
            located = ApiError(exc.status, exc.detail, (match.group("field") or None) if match else exc.field)
            render_problems(errors, source, [_refusal(source, change, located)])
            errors.print("Nothing was applied: fix the file and apply again.")
            raise typer.Exit(1) from None
    issued = []
    for change, result in zip(owner, applied["results"], strict=True):
        if result["op"] == "issue_token":
            token = result["result"]
            issued.append(
                {"name": change.key, "id": token["id"], "subject": token.get("subject"), "token": token["token"]}
            )
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
