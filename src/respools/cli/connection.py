"""What every command that talks to the service shares: the ``--url``/``--token`` options, one
:class:`respools.client.Client` (the SDK's, so the CLI has no HTTP layer of its own), and turning the
API's refusals into one line on stderr and exit status 1 instead of a traceback."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from pydantic import ValidationError
from rich.markup import escape

from respools.cli.output import errors
from respools.client.errors import ApiError, RespoolsError, ServerUnreachable
from respools.client.transport import RetryPolicy

if TYPE_CHECKING:
    from respools.client import Client

UrlOption = Annotated[
    str | None,
    typer.Option("--url", help="service URL (default: $RESPOOLS_URL, the config file, or http://127.0.0.1:8000)"),
]
TokenOption = Annotated[
    str | None,
    typer.Option("--token", help="bearer token (default: $RESPOOLS_TOKEN or the config file)", show_default=False),
]


CLI_RETRY = RetryPolicy(attempts=3, budget_s=30.0)
"""Fewer tries than the SDK's default for steps that must not fail: a person at a terminal wants to hear
within a second or two that nothing listens. The budget still covers a slow first answer (the service
loads a stack's backend libraries the first time it vets a pool of that stack)."""


def connect(url: str | None, token: str | None) -> Client:
    """The SDK's client, configured from the options, then ``RESPOOLS_*`` variables and the config file."""
    from respools.client import Client

    with api_errors():
        return Client(url=url, token=token, retry=CLI_RETRY)


def fail(message: str, code: int = 1) -> NoReturn:
    errors.print(f"[red]error:[/red] {message}", soft_wrap=True)
    raise typer.Exit(code)


@contextlib.contextmanager
def api_errors() -> Iterator[None]:
    """Exit 1 with the server's ``detail`` (and ``field``) on a refusal, or with the client's reason when
    the service cannot be reached or the configuration is incomplete."""
    try:
        yield
    except ApiError as exc:
        field = f" [dim](field: {exc.field})[/dim]" if exc.field else ""
        fail(f"{exc.status}: {escape(exc.detail)}{field}")
    except ServerUnreachable as exc:
        fail(f"{escape(str(exc))}. Is the service running? Set --url or RESPOOLS_URL.")
    except RespoolsError as exc:
        fail(escape(str(exc)))


def pairs(values: list[str] | None, option: str) -> dict[str, str]:
    """``["gpu=2", "mcpu=4000"]`` → ``{"gpu": "2", "mcpu": "4000"}``, refusing anything without ``=``."""
    out: dict[str, str] = {}
    for value in values or []:
        key, sep, amount = value.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"write {value!r} as key=value", param_hint=option)
        out[key.strip()] = amount.strip()
    return out


def amounts(values: list[str] | None, option: str) -> dict[str, float]:
    """``key=amount`` pairs as a wire resource vector (``gpu=0.5`` → ``{"gpu": 0.5}``)."""
    out: dict[str, float] = {}
    for key, text in pairs(values, option).items():
        try:
            out[key] = float(text)
        except ValueError:
            raise typer.BadParameter(f"{key}={text}: the amount must be a number", param_hint=option) from None
    return {k: (int(v) if v.is_integer() else v) for k, v in out.items()}


SPEC_FLAGS = {
    "labels": "--label",
    "pools": "--pool",
    "priority": "--priority",
    "max_retries": "--max-retries",
    "idempotency_key": "--idempotency-key",
    "subject": "--subject",
    "resources": "--resource",
}
"""The flag of ``respools run`` that sets each field of a request spec."""


def refused_spec(exc: ValueError) -> typer.BadParameter:
    """A spec the model refused, said as the API says it (the flag at fault, what is allowed, how to fix
    it), never as pydantic's own report with its link."""
    if not isinstance(exc, ValidationError):
        return typer.BadParameter(str(exc))
    error = exc.errors()[0]
    loc = [str(part) for part in error.get("loc", ())]
    message = str(error.get("msg", "invalid value")).removeprefix("Value error, ")
    flag = SPEC_FLAGS.get(loc[0]) if loc else None
    if flag == "--resource" and message.startswith(("amount of 'gpu'", "gpu amounts")):
        flag = "--gpu"
    elif flag == "--resource" and message.startswith("amount of 'mig."):
        flag = "--mig"
    return typer.BadParameter(f"{message} (see respools run --help)", param_hint=flag)
