"""Alembic environment. The service runs migrations itself at start (see ``respools.server.db.migrate``)
and hands over its connection through ``config.attributes``; the offline mode serves ``alembic
upgrade --sql`` for operators who review DDL before applying it."""

from __future__ import annotations

from alembic import context
from sqlalchemy import engine_from_config, pool

from respools.server.db.tables import METADATA

config = context.config


def run_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"), target_metadata=METADATA, literal_binds=True, render_as_batch=True
    )
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, target_metadata=METADATA, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = engine_from_config(
        config.get_section(config.config_ini_section, {}), prefix="sqlalchemy.", poolclass=pool.NullPool
    )
    with engine.connect() as conn:
        context.configure(connection=conn, target_metadata=METADATA, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
