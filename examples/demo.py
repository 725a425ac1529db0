"""``make demo``: respools end to end on one machine, in well under a minute, no GPU needed.

1. starts the pool service on SQLite in a temporary directory;
2. applies ``examples/demo-pools.yaml`` the way a platform team would (``respools apply``), twice, to show
   that the second apply finds nothing to change;
3. runs two teams' steps: research borrows idle GPUs, prod takes its reserved share back, research's
   step catches ``LeasePreempted``, checkpoints, is requeued and resumes from its checkpoint; both finish;
4. prints what happened (a summary and the service's event log) and the dashboard's URL, and stops the
   service. ``--keep`` leaves it running until Ctrl-C, to look at the dashboard.

Exit status 0 when the story went as described, 1 otherwise (the test suite runs this script).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import typer
from demo_report import event_log, print_report
from demo_service import start_service
from demo_steps import Narrator, StepRecord, prod_batch_score, research_train
from rich.console import Console

from respools.backends.local.hostname import HOST_NAME_ENV
from respools.cli.apply import apply_file
from respools.client import Client

HERE = Path(__file__).resolve().parent
POOLS = HERE / "demo-pools.yaml"
HOST = "demo-host"
"""The inventory's host name: leases are placed on it, and this process realizes them as that host."""
WORKLOAD_TIMEOUT_S = 45.0


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--keep", action="store_true", help="keep the service running until Ctrl-C")
    parser.add_argument("--port", type=int, default=None, help="port for the service (default: a free one)")
    parser.add_argument("--summary-json", type=Path, default=None, help="also write the outcome as JSON here")
    return parser.parse_args(argv)


def apply_pools(console: Console, admin: Client) -> dict[str, str]:
    """Apply the demo's file twice; the team tokens it issues, by subject."""
    shown = POOLS.relative_to(HERE.parent) if POOLS.is_relative_to(HERE.parent) else POOLS
    console.print("\n[bold]2. The platform team applies the pools[/bold]")
    console.print(f"   $ respools apply -f {shown}")
    applied = apply_file(str(POOLS), admin, show_secrets=False)
    console.print(f"\n   $ respools apply -f {shown}   [dim]# again: nothing changes[/dim]")
    again = apply_file(str(POOLS), admin)
    if not again.plan.empty:
        raise RuntimeError("the second apply found changes: apply is not idempotent")
    return {token["subject"]: token["token"] for token in applied.tokens}


def run_steps(console: Console, url: str, tokens: dict[str, str], workdir: Path) -> list[StepRecord]:
    console.print("\n[bold]3. Two teams run their pipelines[/bold]")
    say = Narrator(console)
    train = StepRecord("research", "train", "3 GPU, preemptible")
    score = StepRecord("prod", "batch-score", "2 GPU")
    underway = threading.Event()
    threads = [
        threading.Thread(
            target=research_train, args=(url, tokens["research"], workdir, say, train, underway), name="research"
        ),
        threading.Thread(target=prod_batch_score, args=(url, tokens["prod"], say, score, underway), name="prod"),
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + WORKLOAD_TIMEOUT_S
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            record = train if thread.name == "research" else score
            record.error = f"still running after {WORKLOAD_TIMEOUT_S:.0f} s"
    return [train, score]


def went_as_described(records: list[StepRecord]) -> list[str]:
    """What differs from the story the demo tells (empty when all went as described)."""
    train, score = records
    problems = [f"{r.team}/{r.step}: {r.error}" for r in records if r.error]
    if train.borrowed_gpus <= 0:
        problems.append("research/train never borrowed")
    if not train.preemptions:
        problems.append("research/train was never preempted")
    if train.attempts < 2 or train.resumed_from is None:
        problems.append("research/train did not resume from its checkpoint")
    if score.attempts != 1:
        problems.append("prod/batch-score did not run once")
    return problems


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    os.environ[HOST_NAME_ENV] = HOST
    logging.getLogger("respools").addHandler(logging.NullHandler())  # the narration says it all
    console = Console(highlight=False)
    console.rule("[bold]respools demo[/bold]")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="respools-demo-") as tmp:
        workdir = Path(tmp)
        console.print(f"[bold]1. Starting the pool service[/bold] on SQLite ({workdir / 'respools.db'})")
        service = start_service(workdir, args.port)
        try:
            console.print(f"   ready at {service.url} after {time.monotonic() - started:.1f} s")
            with Client(service.url, service.admin_token) as admin:
                tokens = apply_pools(console, admin)
                records = run_steps(console, service.url, tokens, workdir)
                events = event_log(admin)
            print_report(console, records, events)
            problems = went_as_described(records)
            _write_summary(args.summary_json, records, events, problems, time.monotonic() - started)
            console.print(f"\n[bold]Dashboard:[/bold] {service.url}/  [dim](admin token: {service.admin_token})[/dim]")
            if problems:
                console.print("[red]The demo did not go as described:[/red] " + "; ".join(problems))
            if args.keep:
                _wait_for_ctrl_c(console)
        except typer.Exit:  # apply printed what went wrong
            return 1
        finally:
            service.stop()
        console.print(f"service stopped after {time.monotonic() - started:.1f} s; its temporary files are removed")
    return 1 if problems else 0


def _write_summary(
    path: Path | None, records: list[StepRecord], events: list[dict[str, object]], problems: list[str], took: float
) -> None:
    if path is None:
        return
    summary = {
        "steps": [r.as_dict() for r in records],
        "event_kinds": [e["kind"] for e in events],
        "problems": problems,
        "seconds": round(took, 1),
    }
    path.write_text(json.dumps(summary, indent=2))


def _wait_for_ctrl_c(console: Console) -> None:
    console.print("[dim]The service keeps running; Ctrl-C stops it.[/dim]")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        console.print()


if __name__ == "__main__":
    sys.exit(main())
