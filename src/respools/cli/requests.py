"""``respools request``: what steps asked for, why they wait, and submitting or cancelling one by hand.

Submitting here does not hold the lease (no heartbeats): it is for trying out a pool's rules. A step
holds its lease with ``respools.lease()`` or ``respools run``."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from respools.cli import app
from respools.cli.connection import TokenOption, UrlOption, amounts, api_errors, connect, pairs
from respools.cli.output import Format, OutputOption, labels, print_object, print_rows, state, vector, when

request_app = typer.Typer(help="Requests: what steps ask for, their queue position and why they wait.")
app.add_typer(request_app, name="request", no_args_is_help=True)

RequestId = Annotated[str, typer.Argument(help="request id")]

REQUEST_COLUMNS: list[tuple[str, Any]] = [
    ("ID", lambda r: r["id"]),
    ("SUBJECT", lambda r: r["subject"]),
    ("RESOURCES", lambda r: vector(r["resources"])),
    ("STATE", lambda r: state(r["state"])),
    ("POS", lambda r: "-" if r.get("queue_position") is None else str(r["queue_position"])),
    ("WAITING FOR", lambda r: r.get("wait_reason") or "-"),
    ("ATTEMPT", lambda r: str(r.get("attempt", 0))),
    ("SUBMITTED", lambda r: when(r["submitted_at"])),
    ("LABELS", lambda r: labels(r.get("labels"))),
]


@request_app.command("list")
def list_requests(
    subject: Annotated[str | None, typer.Option(help="only this subject")] = None,
    request_state: Annotated[list[str] | None, typer.Option("--state", help="only these states, repeatable")] = None,
    label: Annotated[str | None, typer.Option(help="only requests with this label, key=value")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 100,
    output: OutputOption = Format.TABLE,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Requests, newest first, with queue position and wait reason."""
    params: dict[str, Any] = {"limit": limit}
    params |= {k: v for k, v in {"subject": subject, "state": request_state, "label": label}.items() if v}
    client = connect(url, token)
    with api_errors():
        rows = client.get("/v1/requests", params=params)
    print_rows(rows, REQUEST_COLUMNS, output, title="requests")


@request_app.command("describe")
def describe_request(
    request_id: RequestId, output: OutputOption = Format.TABLE, url: UrlOption = None, token: TokenOption = None
) -> None:
    """One request with its state, reason and lease."""
    client = connect(url, token)
    with api_errors():
        request = client.get(f"/v1/requests/{request_id}")
    if output == Format.TABLE:
        request = request | {"state": state(request["state"])}
    print_object(request, output, title=f"request {request_id}")


@request_app.command("create")
def create_request(
    gpu: Annotated[float | None, typer.Option(help="GPUs (fractions allowed: 0.25)")] = None,
    resource: Annotated[list[str] | None, typer.Option(help="other keys, key=amount, repeatable")] = None,
    pool: Annotated[list[str] | None, typer.Option(help="candidate pools, repeatable (default: all)")] = None,
    subject: Annotated[str | None, typer.Option(help="default: the token's subject")] = None,
    preemptible: Annotated[bool, typer.Option(help="may borrow idle capacity and be preempted")] = False,
    priority: Annotated[int, typer.Option(help="order within the subject")] = 0,
    max_retries: Annotated[int, typer.Option(min=0, help="requeues after preemption")] = 0,
    label: Annotated[list[str] | None, typer.Option(help="key=value, repeatable")] = None,
    wait: Annotated[float, typer.Option(min=0, help="seconds to wait for a decision")] = 0,
    output: OutputOption = Format.TABLE,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Submit a request (nothing heartbeats it: its lease expires after the pool's TTL)."""
    resources: dict[str, Any] = amounts(resource, "--resource")
    if gpu is not None:
        resources["gpu"] = gpu
    if not resources:
        raise typer.BadParameter("ask for something: --gpu 1 or --resource key=amount", param_hint="--gpu")
    body: dict[str, Any] = {
        "resources": resources,
        "preemptible": preemptible,
        "priority": priority,
        "max_retries": max_retries,
        "labels": pairs(label, "--label"),
    }
    if pool:
        body["pools"] = pool
    if subject:
        body["subject"] = subject
    client = connect(url, token)
    path = f"/v1/requests?wait={wait:g}" if wait else "/v1/requests"
    with api_errors():
        request = client.post(path, json=body)
    if output == Format.TABLE:
        request = request | {"state": state(request["state"])}
    print_object(request, output, title=f"request {request['id']}")


@request_app.command("cancel")
def cancel_request(
    request_id: RequestId, output: OutputOption = Format.TABLE, url: UrlOption = None, token: TokenOption = None
) -> None:
    """Cancel a request, releasing its lease if it holds one."""
    client = connect(url, token)
    with api_errors():
        request = client.post(f"/v1/requests/{request_id}/cancel")
    if output == Format.TABLE:
        request = request | {"state": state(request["state"])}
    print_object(request, output, title=f"request {request_id}", fields=["state", "reason", "lease_id"])
