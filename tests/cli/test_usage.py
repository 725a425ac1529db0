"""``respools usage`` against a real service: a lease granted half in share and half borrowed, then
preempted, read back as JSON, CSV and a table."""

from __future__ import annotations

import csv
import io
import uuid
from datetime import datetime

import pytest

from tests.cli.conftest import Cli


def test_usage_in_every_format(cli: Cli) -> None:
    s = uuid.uuid4().hex[:6]
    pool, subject = f"pool-{s}", f"team-{s}"
    cli.run("pool", "create", pool, "--capacity", "gpu=4", "--grace", "30")
    cli.run("subject", "create", subject)
    cli.run("policy", "create", subject, pool, "--reserved", "gpu=1", "--limit", "gpu=4")
    token = cli.json("token", "create", "--role", "subject", "--subject", subject)["token"]
    request = cli.json("request", "create", "--gpu", "2", "--preemptible", "--wait", "10", token=token)
    cli.run("lease", "preempt", request["lease_id"], "--grace", "20")
    lease = cli.json("lease", "release", request["lease_id"], token=token)
    assert lease["state"] == "preempted"
    held = (datetime.fromisoformat(lease["released_at"]) - datetime.fromisoformat(lease["granted_at"])).total_seconds()

    report = cli.json("usage", "--since", "1h", "--by", "subject,pool", token=token)
    (row,) = report["rows"]
    assert (row["subject"], row["pool"]) == (subject, pool)
    assert row["in_share"]["gpu"] == pytest.approx(held, abs=0.002)
    assert row["borrowed"]["gpu"] == pytest.approx(held, abs=0.002)
    assert row["preempted"]["gpu"] == pytest.approx(2 * held, abs=0.002)

    text = cli.run("usage", "--since", "1h", "--by", "subject,pool,hour", "--format", "csv", token=token).stdout
    lines = {line["key"]: line for line in csv.DictReader(io.StringIO(text))}
    line = lines["gpu"]  # every key of the pool has its line (``step_run`` counts runs, for one)
    assert (line["subject"], line["pool"], line["key"]) == (subject, pool, "gpu")
    assert line["bucket"].endswith(":00:00Z")
    assert float(line["total_s"]) == pytest.approx(2 * held, abs=0.004)
    assert float(line["preempted_s"]) == float(line["total_s"])

    table = cli.run("usage", "--since", "1h", "--subject", subject).stdout
    assert subject in table and "BORROWED (h)" in table and "gpu" in table

    refused = cli.run("usage", "--by", "team", code=None)
    assert refused.exit_code != 0 and "by" in refused.stderr
