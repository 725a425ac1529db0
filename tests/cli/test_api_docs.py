"""``docs/api.md`` is generated from the service's OpenAPI document; a route or schema change without
``make api-docs`` fails here with the command to run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_api_reference_is_current() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "api_docs.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr or result.stdout


def test_api_reference_covers_every_route_and_schema() -> None:
    text = (ROOT / "docs" / "api.md").read_text()
    for heading in ("### `PUT /v1/pools/{pool}`", "### `POST /v1/requests`", "### `GET /v1/events/stream`"):
        assert heading in text
    for schema in ("PoolSpec", "PolicySpec", "RequestSpec", "Lease", "ErrorBody"):
        assert f'<a id="schema-{schema.lower()}"></a>' in text
