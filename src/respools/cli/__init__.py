"""The ``respools`` command. Each command group lives in its own module of this package and is
registered here, so that adding a group touches one line."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="respools",
    help="GPU resource pools for ML pipelines.",
    no_args_is_help=True,
    rich_markup_mode="rich",
)


@app.callback()
def _root() -> None:
    """GPU resource pools for ML pipelines."""


def _register() -> None:
    # Imported for their side effect of adding commands to ``app``; keep one line per module.
    from respools.cli import (
        agent,  # noqa: F401
        apply,  # noqa: F401
        events,  # noqa: F401
        leases,  # noqa: F401
        policies,  # noqa: F401
        pools,  # noqa: F401
        requests,  # noqa: F401
        reservations,  # noqa: F401
        run,  # noqa: F401
        server,  # noqa: F401
        simulate,  # noqa: F401
        subjects,  # noqa: F401
        tokens,  # noqa: F401
        trace,  # noqa: F401
        usage,  # noqa: F401
    )


_register()
