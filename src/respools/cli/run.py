"""``respools run [options] -- cmd ...``: run any command under a lease.

The command gets the lease's environment (``CUDA_VISIBLE_DEVICES``, memory caps for fractions,
``RESPOOLS_LEASE_ID``, ``RESPOOLS_ATTEMPT``), SIGTERM on preemption notice and SIGKILL at the deadline;
with ``--max-retries`` it runs again when its request is granted again. ``respools run`` exits with the
command's status, so it drops into scripts and batch systems in front of the real command. The engine is
:mod:`respools.client.supervise`; this module only reads the options.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from respools.cli import app
from respools.cli.connection import TokenOption, UrlOption, amounts, api_errors, pairs, refused_spec
from respools.cli.output import errors

if TYPE_CHECKING:
    from respools.client import Client
    from respools.model import RequestSpec

RUN_HELP = (
    "Run a command holding a lease: [bold]respools run --gpu 1 -- python train.py[/bold]. "
    "Preemption reaches the command as SIGTERM, then SIGKILL at the deadline; with --max-retries it runs again "
    "(RESPOOLS_ATTEMPT tells it which attempt). Exits with the command's status. On a pool whose stack runs "
    "jobs (vertex, databricks) the command runs there as a job: [bold]respools run --pool vertex-a100 --gpu 2 "
    "--image IMAGE -- python train.py[/bold]; see docs/cloud-runners.md."
)


def _say(text: str) -> None:
    errors.print(f"[dim]respools:[/dim] {escape(text)}", soft_wrap=True)


@app.command(
    "run",
    help=RUN_HELP,
    context_settings={"allow_interspersed_args": False},
    no_args_is_help=True,
)
def run(
    command: Annotated[list[str], typer.Argument(help="the command and its arguments (after --)", show_default=False)],
    gpu: Annotated[
        float | None, typer.Option("--gpu", help="GPUs: 2 for two devices, 0.25 for a quarter of one")
    ] = None,
    mig: Annotated[
        list[str] | None, typer.Option("--mig", help="a MIG slice by profile, e.g. 3g.40gb (repeatable)")
    ] = None,
    resource: Annotated[
        list[str] | None, typer.Option("--resource", "-r", help="any other key as key=amount (repeatable)")
    ] = None,
    pool: Annotated[list[str] | None, typer.Option("--pool", help="candidate pool (repeatable; default: all)")] = None,
    preemptible: Annotated[bool, typer.Option("--preemptible", help="may run on borrowed capacity")] = False,
    priority: Annotated[int, typer.Option(help="priority among your own requests")] = 0,
    max_retries: Annotated[int, typer.Option("--max-retries", min=0, help="reruns after preemption")] = 0,
    retry_backoff: Annotated[
        float, typer.Option("--retry-backoff", min=0, help="seconds before the first rerun (doubling)")
    ] = 1.0,
    timeout: Annotated[
        float | None, typer.Option("--timeout", min=0, help="give up waiting for a grant after this many seconds")
    ] = None,
    label: Annotated[list[str] | None, typer.Option("--label", help="key=value (repeatable)")] = None,
    subject: Annotated[str | None, typer.Option(help="subject to request for (admin tokens)")] = None,
    image: Annotated[
        str | None,
        typer.Option(
            "--image", help="container image of the job, on a pool whose stack runs jobs (vertex, databricks)"
        ),
    ] = None,
    idempotency_key: Annotated[
        str | None,
        typer.Option("--idempotency-key", help="the same key finds the same request (and its job) after a restart"),
    ] = None,
    poll: Annotated[
        float, typer.Option("--poll", min=0.01, help="seconds between looks at the job, on a stack that runs jobs")
    ] = 5.0,
    progress: Annotated[
        bool | None, typer.Option("--progress/--no-progress", help="live wait line (default: on a terminal)")
    ] = None,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    from respools.client import Client
    from respools.client.retry import Backoff
    from respools.client.spec import build_spec
    from respools.client.supervise import Supervisor

    logging.basicConfig(level=logging.WARNING, format="respools: %(message)s")
    mig_counts: dict[str, int] = {}
    for profile in mig or []:
        mig_counts[profile] = mig_counts.get(profile, 0) + 1
    try:
        spec = build_spec(
            gpu=gpu,
            mig=mig_counts or None,
            pool=pool or None,
            preemptible=preemptible,
            priority=priority,
            max_retries=max_retries,
            labels=pairs(label, "--label"),
            subject=subject,
            idempotency_key=idempotency_key,
            resources=amounts(resource, "--resource"),
        )
    except ValueError as exc:
        raise refused_spec(exc) from None
    with api_errors():
        # The SDK's default retries, not the CLI's quick ones: heartbeats of a long run must ride out a
        # server restart.
        client = Client(url=url, token=token)
        if image is not None or _runs_jobs(client, pool or []):
            status = _run_as_job(client, spec, command, image, poll, retry_backoff, timeout, progress)
            raise typer.Exit(status)
        supervisor = Supervisor(
            client,
            spec,
            command,
            backoff=Backoff(base_s=retry_backoff),
            timeout=timeout,
            progress=progress,
            say=_say,
        )
        status = supervisor.run()
    raise typer.Exit(status)


def _runs_jobs(client: Client, pools: list[str]) -> bool:
    """Whether the named pools are on a stack that runs work as jobs of its own (through its backend plugin;
    a plugin that does not load leaves ``respools run`` as it was)."""
    from respools.backends import BackendError, get_backend
    from respools.client.errors import ApiError

    for name in pools:
        try:
            if get_backend(client.get_pool(name).stack).runs_jobs:
                return True
        except (BackendError, ApiError):  # an unknown pool is the server's to refuse, with its own message
            continue
    return False


def _run_as_job(
    client: Client,
    spec: RequestSpec,
    command: list[str],
    image: str | None,
    poll: float,
    retry_backoff: float,
    timeout: float | None,
    progress: bool | None,
) -> int:
    """The command as the pool's provider job (:mod:`respools.client.jobs`); its result is the exit status."""
    from respools.backends import BackendError
    from respools.backends.jobs import JobError
    from respools.client.jobs import JobRun
    from respools.client.retry import Backoff

    logging.getLogger("respools.client").setLevel(logging.INFO)  # queue position and reason as they change
    run = JobRun(
        client,
        spec,
        command,
        image=image,
        poll_s=poll,
        backoff=Backoff(base_s=retry_backoff),
        timeout=timeout,
        progress=progress,
        say=_say,
    )
    try:
        outcome = run.run()
    except (JobError, BackendError) as exc:
        _say(f"error: {exc}")
        return 1
    return outcome.exit_status
