"""``respools token``: issue, list and revoke bearer tokens, and ``whoami`` for the one in use."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from respools.cli import app
from respools.cli.connection import TokenOption, UrlOption, api_errors, connect
from respools.cli.output import Format, OutputOption, console, print_json, print_object, print_rows, when
from respools.model import Role

token_app = typer.Typer(help="Tokens: bearer secrets with a role (admin, subject, viewer).")
app.add_typer(token_app, name="token", no_args_is_help=True)

_COLUMNS: list[tuple[str, Any]] = [
    ("ID", lambda r: r["id"]),
    ("ROLE", lambda r: r["role"]),
    ("SUBJECT", lambda r: r.get("subject") or "-"),
    ("DESCRIPTION", lambda r: r.get("description") or "-"),
    ("CREATED", lambda r: when(r["created_at"])),
]


@token_app.command("list")
def list_tokens(
    subject: Annotated[str | None, typer.Option(help="only this subject's")] = None,
    output: OutputOption = Format.TABLE,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Tokens (never their secrets)."""
    client = connect(url, token)
    with api_errors():
        rows = client.get("/v1/tokens", params={"subject": subject} if subject else None)
    print_rows(rows, _COLUMNS, output, title="tokens")


@token_app.command("create")
def create_token(
    role: Annotated[Role, typer.Option(help="admin defines, subject submits, viewer reads")],
    subject: Annotated[str | None, typer.Option(help="required for role subject")] = None,
    description: Annotated[str | None, typer.Option(help="what it is for")] = None,
    output: OutputOption = Format.TABLE,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Issue a token; its secret is printed once."""
    body = {"role": role.value, "subject": subject, "description": description}
    client = connect(url, token)
    with api_errors():
        issued = client.post("/v1/tokens", json=body)
    if output == Format.JSON:
        print_json(issued)
        return
    console.print(f"token {issued['id']} ({issued['role']}" + (f" for {subject})" if subject else ")"))
    console.print(f"[bold]{issued['token']}[/bold]", soft_wrap=True)
    console.print("[dim]shown once: store it now (RESPOOLS_TOKEN, or the config file)[/dim]")


@token_app.command("delete")
def delete_token(
    token_id: Annotated[str, typer.Argument(help="token id (tok_…)")], url: UrlOption = None, token: TokenOption = None
) -> None:
    """Revoke a token at once on every replica."""
    client = connect(url, token)
    with api_errors():
        client.delete(f"/v1/tokens/{token_id}")
    console.print(f"revoked token {token_id}")


@app.command("whoami")
def whoami(output: OutputOption = Format.TABLE, url: UrlOption = None, token: TokenOption = None) -> None:
    """The role and subject of the token in use."""
    client = connect(url, token)
    with api_errors():
        principal = client.get("/v1/whoami")
    print_object(principal, output, title="you are")
