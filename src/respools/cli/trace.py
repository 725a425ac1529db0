"""``respools trace``: traces for ``respools simulate``, from the service's history or made up.

``export`` reads the event log page by page (``GET /v1/events``), so what it writes is the same from
every replica; ``generate`` makes a synthetic trace shaped like a published study of a real GPU cluster
(``respools.whatif.synthetic``)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from respools.cli import app
from respools.cli.connection import TokenOption, UrlOption, api_errors, connect, fail
from respools.cli.output import console
from respools.whatif.history import trace_from_events
from respools.whatif.synthetic import SyntheticSpec, generate
from respools.whatif.trace import write_trace

trace_app = typer.Typer(help="Traces for `respools simulate`: export the service's history, or generate one.")
app.add_typer(trace_app, name="trace", no_args_is_help=True)

EVENTS_PAGE = 1000


@trace_app.command("export")
def export(
    output: Annotated[Path, typer.Option("--output", "-o", dir_okay=False, help="file to write (.jsonl or .csv)")],
    since: Annotated[datetime, typer.Option(help="first submission to include (UTC unless an offset is given)")],
    until: Annotated[datetime | None, typer.Option(help="end of the window (default: now)")] = None,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Write the steps submitted since SINCE as a trace; `submit_s` counts from SINCE."""
    start, end = _utc(since), _utc(until) if until else datetime.now(UTC)
    if end <= start:
        fail("--until must be after --since")
    client = connect(url, token)
    events: list[dict[str, Any]] = []
    after = 0
    with api_errors():
        while True:
            page: list[dict[str, Any]] = client.get("/v1/events", params={"after": after, "limit": EVENTS_PAGE})
            events.extend(page)
            if len(page) < EVENTS_PAGE:
                break
            after = page[-1]["id"]
    history = trace_from_events(events, start, end)
    count = write_trace(history.jobs, output)
    console.print(f"{count} step(s) written to {output} (second 0 = {start.isoformat()})")
    for reason, skipped in sorted(history.skipped.items()):
        console.print(f"  left out, {reason}: {skipped}")


@trace_app.command("generate")
def generate_trace(
    output: Annotated[Path, typer.Option("--output", "-o", dir_okay=False, help="file to write (.jsonl or .csv)")],
    gpus: Annotated[int, typer.Option(min=1, max=1_000_000, help="GPUs of the fleet the load is sized for")],
    jobs: Annotated[int, typer.Option(min=1, max=10_000_000, help="number of steps")],
    days: Annotated[float, typer.Option(min=0.001, max=366, help="length of the trace")] = 7.0,
    subject: Annotated[list[str] | None, typer.Option(help="a subject, repeatable; the first submits the most")] = None,
    load: Annotated[float, typer.Option(min=0.01, max=10, help="offered GPU-time as a share of the fleet's")] = 0.85,
    preemptible_share: Annotated[float, typer.Option(min=0, max=1, help="share of preemptible steps")] = 0.7,
    seed: Annotated[int, typer.Option(min=0, max=2**32 - 1, help="random seed (same seed, same trace)")] = 1,
) -> None:
    """A synthetic trace: GPUs per step, run times and arrivals by hour after a published cluster study."""
    spec = SyntheticSpec(
        gpus=gpus,
        jobs=jobs,
        days=days,
        subjects=tuple(subject or SyntheticSpec.subjects),
        load=load,
        preemptible_share=preemptible_share,
        seed=seed,
    )
    try:
        trace = generate(spec)
    except ValidationError as exc:
        fail(f"--subject: {exc.errors()[0]['msg']} (subjects are lowercase names such as 'team-1')")
    count = write_trace(trace, output)
    console.print(f"{count} step(s) written to {output}")


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
