"""``respools simulate``: replay a trace against one or more definitions files, side by side.

Runs offline: no server, no token. Each ``-f`` file is read as ``respools apply`` reads it (pools,
policies, reservations), the trace is replayed through the scheduling core on a simulated clock, and
the figures of every file are printed next to each other, with the work-conserving reference."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from respools.cli import app
from respools.cli.connection import fail
from respools.cli.output import console, print_json
from respools.definitions.document import load_definitions
from respools.definitions.source import DefinitionFileError, Source
from respools.whatif.reference import work_conserving
from respools.whatif.replay import DEFAULT_START, ReplayOptions, replay
from respools.whatif.report import SUBJECT_COLUMNS, Figures, figures, subject_cells
from respools.whatif.trace import TraceError, TraceJob, read_trace


@app.command("simulate")
def simulate(
    trace: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="trace file (.jsonl or .csv)")],
    files: Annotated[
        list[Path], typer.Option("--file", "-f", exists=True, dir_okay=False, help="definitions file, repeatable")
    ],
    html: Annotated[Path | None, typer.Option(help="write a self-contained HTML report with charts here")] = None,
    json: Annotated[bool, typer.Option("--json", help="print the figures as one JSON object")] = False,
    start: Annotated[
        datetime, typer.Option(help="the instant second 0 of the trace stands for (reservation windows)")
    ] = DEFAULT_START,
    cycle_s: Annotated[
        float, typer.Option(min=0.1, max=3600, help="simulated seconds between scheduling cycles")
    ] = ReplayOptions.cycle_s,
    step_aside_s: Annotated[
        float, typer.Option(min=0, max=86400, help="how long a step under notice takes to checkpoint and release")
    ] = ReplayOptions.step_aside_s,
) -> None:
    """Replay TRACE once per definitions file and compare waits, utilization, borrowing and preemption."""
    try:
        jobs = read_trace(trace)
    except (TraceError, OSError) as exc:
        fail(f"cannot read the trace: {exc}")
    if not jobs:
        fail(f"{trace} holds no steps")
    options = ReplayOptions(
        start=start if start.tzinfo else start.astimezone(), cycle_s=cycle_s, step_aside_s=step_aside_s
    )
    results = [_run(jobs, path, options, quiet=json) for path in files]
    if html is not None:
        from respools.whatif.html import write_report  # matplotlib is only imported for a report

        write_report(html, trace.name, results)
    if json:
        print_json({"trace": str(trace), "jobs": len(jobs), "runs": [r.as_dict() for r in results]})
        return
    _print(results)
    if html is not None:
        console.print(f"report written to {html}")


def _run(jobs: list[TraceJob], path: Path, options: ReplayOptions, *, quiet: bool) -> Figures:
    try:
        doc = load_definitions(Source.read(path))
    except DefinitionFileError as exc:
        fail(str(exc))
    reference = work_conserving(jobs, doc.pools, doc.policies)
    horizon = max(reference.end_s, jobs[-1].submit_s)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}% of the simulated time"),
        TimeElapsedColumn(),
        console=console,
        disable=quiet,
        transient=True,
    ) as bar:
        task = bar.add_task(f"replaying {path.name}", total=horizon)
        step = horizon / 200 or 1.0
        shown = [0.0]

        def progress(clock: float) -> None:
            if clock - shown[0] >= step:
                shown[0] = clock
                bar.update(task, completed=min(clock, horizon))

        run = replay(
            jobs, doc.pools, doc.policies, doc.reservations, label=path.name, options=options, progress=progress
        )
    return figures(run, reference, jobs[-1].submit_s)


def _print(results: list[Figures]) -> None:
    pools = Table(title="utilization (of the same window; reference = work-conserving, policies ignored)")
    for column in ("definitions", "pool", "GPUs", "utilization", "reference", "of reference", "GPU-h"):
        pools.add_column(column, justify="left" if column in ("definitions", "pool") else "right")
    for result in results:
        for pool in result.pools:
            ratio = "-" if pool.of_reference is None else f"{pool.of_reference:.1%}"
            pools.add_row(
                result.label,
                pool.pool,
                f"{pool.gpus:g}",
                f"{pool.utilization:.1%}",
                f"{pool.reference_utilization:.1%}",
                ratio,
                f"{pool.busy_gpu_h:,.0f}",
            )
    console.print(pools)
    subjects = Table(title="per subject (waits in minutes; GPU-hours)")
    for column in ("definitions", *SUBJECT_COLUMNS):
        subjects.add_column(column, justify="left" if column in ("definitions", "subject") else "right")
    for result in results:
        for s in result.subjects:
            subjects.add_row(result.label, *subject_cells(s))
    console.print(subjects)
