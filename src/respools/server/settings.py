"""Service settings, read from ``RESPOOLS_*`` environment variables so that every replica of a
deployment (and the ``respools server`` command) is configured the same way."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import platformdirs
from pydantic import BaseModel, ConfigDict, Field, field_validator

ENV_PREFIX = "RESPOOLS_"


def default_database_url() -> str:
    """An SQLite file in the user data dir: the embedded default for one machine."""
    data_dir = Path(platformdirs.user_data_dir("respools", appauthor=False))
    return f"sqlite:///{data_dir / 'respools.db'}"


DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
"""Large enough for a pool whose inventory lists thousands of GPUs, far below what would hurt."""


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    database_url: str = Field(default_factory=default_database_url)
    admin_token: str | None = Field(
        default=None, description="ensure this admin token exists (tests, demos); never printed"
    )
    tick_s: float = Field(default=1.0, gt=0, description="reconciler wakes at least this often")
    election_interval_s: float = Field(default=1.0, gt=0, description="how often followers try to lead")
    host_ttl_s: float = Field(default=90.0, gt=0, description="default lifetime of an agent's host report")
    max_wait_s: float = Field(default=300.0, gt=0, description="longest long-poll a client may ask for")
    recheck_s: float = Field(
        default=5.0,
        gt=0,
        le=3600,
        description="how often long-polls' requests are read in case a notification was lost (its worst delay)",
    )
    max_body_bytes: int = Field(
        default=DEFAULT_MAX_BODY_BYTES, ge=1024, le=1 << 30, description="largest request body accepted (413 above)"
    )
    token_cache_ttl_s: float = Field(default=30.0, ge=0)
    worker_threads: int = Field(default=8, ge=1, description="threads running blocking store calls")
    db_pool_size: int = Field(default=10, ge=1)
    db_max_overflow: int = Field(default=20, ge=0)
    run_reconciler: bool = Field(default=True, description="take part in leader election in this process")
    usage_rollup_s: float = Field(
        default=10.0, gt=0, le=3600, description="how often the leader sums newly ended leases into the usage roll-up"
    )
    log_level: str = "INFO"
    log_json: bool = True
    access_log: bool = Field(default=False, description="log every HTTP request")

    @field_validator("database_url")
    @classmethod
    def _supported_url(cls, value: str) -> str:
        if value.startswith("postgres://"):
            value = "postgresql://" + value[len("postgres://") :]
        if value.startswith("postgresql://"):
            value = "postgresql+psycopg://" + value[len("postgresql://") :]
        if value in {"sqlite://", "sqlite:///"} or ":memory:" in value:
            raise ValueError(
                "an in-memory SQLite database cannot be shared by the API and the reconciler: "
                "give a file, e.g. sqlite:////var/lib/respools/respools.db"
            )
        if not value.startswith(("sqlite:///", "postgresql+psycopg://")):
            raise ValueError("RESPOOLS_DATABASE_URL must be sqlite:///PATH or postgresql://USER@HOST:PORT/DB")
        return value

    @property
    def is_postgres(self) -> bool:
        return self.database_url.startswith("postgresql")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Settings from ``RESPOOLS_<FIELD>`` variables; ``overrides`` win over the environment."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for name in cls.model_fields:
            raw = env.get(ENV_PREFIX + name.upper())
            if raw is not None and raw != "":
                values[name] = raw
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls.model_validate(values)
