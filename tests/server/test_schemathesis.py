"""The service against its own OpenAPI document, fuzzed by schemathesis: every operation, with valid and
invalid input (bounded examples each), must answer without a 5xx and with a response its document
allows. SQLite in CI; a bounded run on PostgreSQL, whose text columns refuse what SQLite stores (NUL).
``RESPOOLS_FUZZ_EXAMPLES`` raises the examples per operation for a long run."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.python import asgi

from respools.server import create_app
from tests.server.conftest import ADMIN_TOKEN, settings_for

EXAMPLES = int(os.environ.get("RESPOOLS_FUZZ_EXAMPLES", "15"))
ENDLESS = {"/v1/events/stream"}
"""Server-sent events never end: each case would wait out the stream. Its query parameters are
``GET /v1/events``'s, fuzzed there."""
AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def fuzz(url: str, examples: int) -> dict[str, Any]:
    """Every operation with positive and negative cases; returns counts for the report."""
    app = create_app(settings_for(url))
    failures: list[str] = []
    cases = 0
    operations = 0
    client = asgi.get_client(app)  # type: ignore[arg-type]  # starlette's ASGI types against schemathesis' own
    with client:  # one lifespan: services started once, every case through this client
        schema = schemathesis.openapi.from_asgi("/openapi.json", app)
        for result in schema.get_all_operations():
            operation = result.ok()  # type: ignore[union-attr]  # an invalid document fails the test here
            if operation.path in ENDLESS:
                continue
            operations += 1
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

                @given(case=operation.as_strategy(generation_mode=mode))
                @settings(
                    max_examples=examples,
                    deadline=None,
                    derandomize=True,
                    database=None,
                    suppress_health_check=list(HealthCheck),
                    phases=[Phase.explicit, Phase.generate],
                )
                def check(case: schemathesis.Case[Any]) -> None:
                    nonlocal cases
                    cases += 1
                    response = case.call(session=client, headers=AUTH)
                    if response.status_code >= 500:
                        failures.append(
                            f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:200]}"
                        )
                        return
                    try:
                        case.validate_response(response, checks=[schemathesis.checks.response_schema_conformance])
                    except Exception as exc:  # one line per broken answer, all of them reported together
                        failures.append(f"{case.method} {case.formatted_path}: {str(exc).splitlines()[0]}")

                try:
                    check()
                except Unsatisfiable:
                    assert mode == GenerationMode.NEGATIVE, operation.label  # nothing to get wrong: no input
    asgi.shutdown_lifespans()  # schemathesis keeps an app's lifespan for the process otherwise
    return {"operations": operations, "cases": cases, "failures": failures}


@pytest.fixture
def sqlite_url() -> Iterator[str]:
    with tempfile.TemporaryDirectory() as tmp:
        yield f"sqlite:///{Path(tmp) / 'respools.db'}"


def test_no_operation_answers_5xx_or_off_schema_on_sqlite(sqlite_url: str) -> None:
    report = fuzz(sqlite_url, EXAMPLES)
    print(f"schemathesis on SQLite: {report['operations']} operations, {report['cases']} cases")
    assert report["operations"] >= 40, report["operations"]
    assert not report["failures"], "\n".join(report["failures"][:20])


@pytest.mark.postgres
def test_no_operation_answers_5xx_or_off_schema_on_postgres(postgres_url_factory: Any) -> None:
    report = fuzz(postgres_url_factory(), max(2, EXAMPLES // 3))
    print(f"schemathesis on PostgreSQL: {report['operations']} operations, {report['cases']} cases")
    assert not report["failures"], "\n".join(report["failures"][:20])
