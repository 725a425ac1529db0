"""The store: packaged migrations create exactly the tables the code declares, on both databases, and
running them again is harmless; settings refuse unusable URLs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from pydantic import ValidationError

from respools.server.db.database import Database
from respools.server.db.migrate import current_revision, head_revision, upgrade
from respools.server.db.tables import METADATA
from respools.server.settings import Settings
from tests.server.conftest import STORES, store_url


@pytest.mark.parametrize("kind", STORES)
def test_migrations_match_the_declared_tables(kind: str, tmp_path: Path, postgres_url_factory: Any) -> None:
    db = Database(Settings(database_url=store_url(kind, tmp_path, postgres_url_factory)))
    try:
        upgrade(db.write_engine)
        upgrade(db.write_engine)
        with db.write_engine.connect() as conn:
            assert current_revision(conn) == head_revision()
            diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), METADATA)
        assert diff == []
    finally:
        db.dispose()


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgres://u@h/db", "postgresql+psycopg://u@h/db"),
        ("postgresql://u@h:5432/db", "postgresql+psycopg://u@h:5432/db"),
        ("sqlite:////var/lib/respools.db", "sqlite:////var/lib/respools.db"),
    ],
)
def test_database_urls_are_normalized(url: str, expected: str) -> None:
    assert Settings(database_url=url).database_url == expected


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:", "mysql://u@h/db"])
def test_unusable_database_urls_are_refused(url: str) -> None:
    with pytest.raises(ValidationError):
        Settings(database_url=url)


def test_settings_come_from_the_environment() -> None:
    settings = Settings.from_env({"RESPOOLS_DATABASE_URL": "postgresql://x@y/z", "RESPOOLS_TICK_S": "0.5"})
    assert settings.is_postgres and settings.tick_s == 0.5
