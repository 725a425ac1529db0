"""``respools pool``: list, describe, create, delete, drain and resume pools.

Pools are usually defined with ``respools apply``; these commands are for looking and for the occasional
quick change (a drain before maintenance, a scratch pool for a test)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from respools.cli import app
from respools.cli.connection import TokenOption, UrlOption, amounts, api_errors, connect
from respools.cli.output import Format, OutputOption, cell, console, print_json, print_object, print_rows, vector, when

pool_app = typer.Typer(help="Pools: named capacity on one stack.", no_args_is_help=True)
app.add_typer(pool_app, name="pool")

PoolName = Annotated[str, typer.Argument(help="pool name")]


def _status_columns() -> list[tuple[str, Any]]:
    return [
        ("NAME", lambda r: r["name"]),
        ("STACK", lambda r: r["stack"]),
        ("CAPACITY", lambda r: vector(r["capacity"])),
        ("IN USE", lambda r: vector(r["in_use"])),
        ("BORROWED", lambda r: vector(r["borrowed"])),
        ("FREE", lambda r: vector(r["free"])),
        ("LEASES", lambda r: str(r["live_leases"])),
        ("WAITING", lambda r: str(r["waiting_requests"])),
        ("HOSTS", lambda r: f"{r['live_hosts']}" + (f" (+{r['lost_hosts']} lost)" if r["lost_hosts"] else "")),
        ("DRAINING", lambda r: "yes" if r["draining"] else ""),
    ]


@pool_app.command("list")
def list_pools(output: OutputOption = Format.TABLE, url: UrlOption = None, token: TokenOption = None) -> None:
    """Pools with their capacity, use, borrowing and queue (JSON: the pools as defined)."""
    client = connect(url, token)
    with api_errors():
        pools: list[dict[str, Any]] = client.get("/v1/pools")
        if output == Format.JSON:
            print_json(pools)
            return
        statuses = [client.get(f"/v1/pools/{pool['name']}/status") for pool in pools]
    print_rows(statuses, _status_columns(), output, title="pools")


@pool_app.command("describe")
def describe_pool(
    name: PoolName, output: OutputOption = Format.TABLE, url: UrlOption = None, token: TokenOption = None
) -> None:
    """A pool's definition, its status now, and the hosts agents report for it."""
    client = connect(url, token)
    with api_errors():
        pool = client.get(f"/v1/pools/{name}")
        status = client.get(f"/v1/pools/{name}/status")
        hosts = client.get(f"/v1/pools/{name}/hosts")
    if output == Format.JSON:
        print_json({"pool": pool, "status": status, "hosts": hosts})
        return
    fields = ["stack", "capacity", "gpu_class", "forms", "preemption_grace_s", "fair_share_preemption"]
    fields += ["lease_ttl_s", "init_timeout_s", "draining", "settings", "labels", "updated_at"]
    print_object(pool, output, title=f"pool {name}", fields=fields)
    console.print()
    print_object(status, output, title="status", fields=["capacity", "in_use", "borrowed", "free"])
    console.print(
        f"{status['live_leases']} live lease(s), {status['preempting_leases']} preempting, "
        f"{status['waiting_requests']} waiting request(s)"
    )
    inventory = pool.get("inventory") or []
    declared = {host["name"] for host in inventory}
    reported = {entry["host"]["name"]: entry for entry in hosts}
    rows = [_host_row(host, None) for host in inventory if host["name"] not in reported]
    rows += [_host_row(entry["host"], entry) for entry in hosts]
    if rows:
        console.print()
        print_rows(rows, _HOST_COLUMNS, output, title="hosts")
    elif not declared:
        console.print("[dim]no inventory: capacity only[/dim]")


def _host_row(host: dict[str, Any], report: dict[str, Any] | None) -> dict[str, Any]:
    gpus = []
    for gpu in host.get("gpus", []):
        slices = [m["profile"] for m in gpu.get("mig_instances", [])]
        gpus.append(f"{gpu['index']}:{gpu['model']}" + (f" [{', '.join(slices)}]" if slices else ""))
    origin = "declared" if report is None else ("agent" if report["live"] else "agent (lost)")
    seen = when(report["last_seen_at"]) if report else "-"
    return {"name": host["name"], "gpus": gpus, "origin": origin, "seen": seen}


_HOST_COLUMNS: list[tuple[str, Any]] = [
    ("HOST", lambda r: r["name"]),
    ("GPUS", lambda r: cell(r["gpus"])),
    ("FROM", lambda r: r["origin"]),
    ("LAST SEEN", lambda r: r["seen"]),
]


@pool_app.command("create")
def create_pool(
    name: PoolName,
    capacity: Annotated[
        list[str] | None, typer.Option("--capacity", "-c", help="key=amount, repeatable (gpu=8, mcpu=64000)")
    ] = None,
    stack: Annotated[str, typer.Option(help="backend: local, kubernetes, vertex, databricks…")] = "local",
    gpu_class: Annotated[str | None, typer.Option(help="GPU class of the pool (e.g. A100-80GB)")] = None,
    grace: Annotated[float | None, typer.Option(help="preemption grace in seconds")] = None,
    fair_share_preemption: Annotated[bool, typer.Option(help="let borrowers preempt each other")] = False,
    output: OutputOption = Format.TABLE,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Create a capacity pool (for inventories and settings, use a file and `respools apply`)."""
    body: dict[str, Any] = {"name": name, "stack": stack, "capacity": amounts(capacity, "--capacity")}
    if gpu_class is not None:
        body["gpu_class"] = gpu_class
    if grace is not None:
        body["preemption_grace_s"] = grace
    if fair_share_preemption:
        body["fair_share_preemption"] = True
    client = connect(url, token)
    with api_errors():
        pool = client.post("/v1/pools", json=body)
    print_object(pool, output, title=f"created pool {name}", fields=["stack", "capacity", "forms", "gpu_class"])


@pool_app.command("delete")
def delete_pool(name: PoolName, url: UrlOption = None, token: TokenOption = None) -> None:
    """Delete a pool with its policies, reservations and host reports (refused while leases hold it)."""
    client = connect(url, token)
    with api_errors():
        client.delete(f"/v1/pools/{name}")
    console.print(f"deleted pool {name}")


@pool_app.command("drain")
def drain_pool(
    name: PoolName, output: OutputOption = Format.TABLE, url: UrlOption = None, token: TokenOption = None
) -> None:
    """Stop granting in a pool; leases already granted run on."""
    _set_draining(name, "drain", output, url, token)


@pool_app.command("resume")
def resume_pool(
    name: PoolName, output: OutputOption = Format.TABLE, url: UrlOption = None, token: TokenOption = None
) -> None:
    """Grant in a drained pool again."""
    _set_draining(name, "resume", output, url, token)


def _set_draining(name: str, verb: str, output: Format, url: str | None, token: str | None) -> None:
    client = connect(url, token)
    with api_errors():
        pool = client.post(f"/v1/pools/{name}/{verb}")
    if output == Format.JSON:
        print_json(pool)
    else:
        console.print(f"pool {name} is {'draining' if pool['draining'] else 'granting'}")
