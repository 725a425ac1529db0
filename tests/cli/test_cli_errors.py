"""Bad flags read like the API's refusals: the flag at fault, what is allowed, how to fix it; never
pydantic's own report with its link. No service is needed: the spec is refused before any call."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from respools.cli import app


@pytest.mark.parametrize(
    ("flags", "flag", "says"),
    [
        (["--gpu", "-1"], "--gpu", "must be a finite number >= 0"),
        (["--gpu", "1e30"], "--gpu", "must be at most"),
        (["--gpu", "1", "--priority", "99999999999"], "--priority", "less than or equal to 1000000000"),
        (["--gpu", "1", "--max-retries", "1000"], "--max-retries", "less than or equal to 100"),
        (["--gpu", "1", "--resource", "Bad Key=1"], "--resource", "invalid resource key"),
    ],
)
def test_a_bad_run_flag_names_the_flag_and_what_it_takes(flags: list[str], flag: str, says: str) -> None:
    result = CliRunner().invoke(app, ["run", *flags, "--", "true"], env={"COLUMNS": "300", "NO_COLOR": "1"})
    assert result.exit_code == 2, result.output
    assert f"Invalid value for {flag}" in result.output and says in result.output, result.output
    assert "pydantic" not in result.output and "errors.pydantic.dev" not in result.output
