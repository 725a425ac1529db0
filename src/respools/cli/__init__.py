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
    from respools.cli import agent  # noqa: F401
    from respools.cli import server  # noqa: F401


_register()
