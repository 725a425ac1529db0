"""``respools subject``: the teams, projects or components that consume capacity. Tokens of role
``subject`` are issued to them, and policies link them to pools."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from respools.cli import app
from respools.cli.connection import TokenOption, UrlOption, api_errors, connect, pairs
from respools.cli.output import Format, OutputOption, console, labels, print_object, print_rows

subject_app = typer.Typer(help="Subjects: the teams, projects or components that consume capacity.")
app.add_typer(subject_app, name="subject", no_args_is_help=True)

Subject = Annotated[str, typer.Argument(help="subject name")]


@subject_app.command("list")
def list_subjects(output: OutputOption = Format.TABLE, url: UrlOption = None, token: TokenOption = None) -> None:
    """Subjects (a subject token sees itself)."""
    client = connect(url, token)
    with api_errors():
        rows = client.get("/v1/subjects")
    columns: list[tuple[str, Any]] = [
        ("NAME", lambda r: r["name"]),
        ("DISPLAY NAME", lambda r: r.get("display_name") or "-"),
        ("LABELS", lambda r: labels(r.get("labels"))),
    ]
    print_rows(rows, columns, output, title="subjects")


@subject_app.command("create")
def create_subject(
    name: Subject,
    display_name: Annotated[str | None, typer.Option(help="how people call it")] = None,
    label: Annotated[list[str] | None, typer.Option(help="key=value, repeatable")] = None,
    output: OutputOption = Format.TABLE,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Create (or update) a subject."""
    body = {"name": name, "display_name": display_name, "labels": pairs(label, "--label")}
    client = connect(url, token)
    with api_errors():
        subject = client.put(f"/v1/subjects/{name}", json=body)
    print_object(subject, output, title=f"subject {name}")


@subject_app.command("delete")
def delete_subject(name: Subject, url: UrlOption = None, token: TokenOption = None) -> None:
    """Delete a subject with its policies, reservations and tokens (refused while it has requests in flight)."""
    client = connect(url, token)
    with api_errors():
        client.delete(f"/v1/subjects/{name}")
    console.print(f"deleted subject {name}")
