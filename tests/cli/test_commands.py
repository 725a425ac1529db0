"""The command groups against a real service, mostly through ``--output json`` (what scripts rely on),
with a look at the tables and at how refusals are reported."""

from __future__ import annotations

import re
import time
import uuid
from typing import Any

import pytest

from tests.cli.conftest import Cli


@pytest.fixture
def world(cli: Cli) -> dict[str, str]:
    """A fresh pool, subject, policy and subject token."""
    s = uuid.uuid4().hex[:6]
    pool, subject = f"pool-{s}", f"team-{s}"
    cli.run("pool", "create", pool, "--capacity", "gpu=4", "--grace", "30")
    cli.run("subject", "create", subject, "--display-name", "Team", "--label", "org=ml")
    cli.run("policy", "create", subject, pool, "--reserved", "gpu=1", "--limit", "gpu=4", "--priority", "5")
    token = cli.json("token", "create", "--role", "subject", "--subject", subject, "--description", "tests")["token"]
    return {"pool": pool, "subject": subject, "token": token}


def test_pool_commands(cli: Cli, world: dict[str, str]) -> None:
    pool = world["pool"]
    listed = {p["name"]: p for p in cli.json("pool", "list")}
    assert listed[pool]["capacity"] == {"gpu": 4} and listed[pool]["preemption_grace_s"] == 30
    described = cli.json("pool", "describe", pool)
    assert described["status"]["free"] == {"gpu": 4}
    assert described["hosts"] == []
    assert cli.json("pool", "drain", pool)["draining"] is True
    assert "is draining" in cli.run("pool", "drain", pool).stdout
    assert cli.json("pool", "resume", pool)["draining"] is False
    table = cli.run("pool", "list").stdout
    assert pool in table and "CAPACITY" in table and "gpu 4" in table


def test_policy_and_subject_commands(cli: Cli, world: dict[str, str]) -> None:
    pool, subject = world["pool"], world["subject"]
    (policy,) = cli.json("policy", "list", "--pool", pool)
    assert policy == {
        "subject": subject,
        "pool": pool,
        "reserved": {"gpu": 1},
        "limit": {"gpu": 4},
        "priority": 5,
        "weight": 1.0,
    }
    assert cli.json("policy", "describe", subject, pool) == policy
    replaced = cli.json("policy", "create", subject, pool, "--reserved", "gpu=2", "--weight", "2")
    assert replaced["reserved"] == {"gpu": 2} and replaced["limit"] is None and replaced["weight"] == 2
    subjects = {s["name"]: s for s in cli.json("subject", "list")}
    assert subjects[subject] == {"name": subject, "display_name": "Team", "labels": {"org": "ml"}}
    cli.run("policy", "delete", subject, pool)
    assert cli.json("policy", "list", "--pool", pool) == []


def test_request_lease_and_event_commands(cli: Cli, world: dict[str, str]) -> None:
    token, subject = world["token"], world["subject"]
    request = cli.json(
        "request", "create", "--gpu", "2", "--preemptible", "--label", "step=train", "--wait", "10", token=token
    )
    assert request["state"] == "granted" and request["resources"]["gpu"] == 2
    (listed,) = cli.json("request", "list", "--label", "step=train", token=token)
    assert listed["id"] == request["id"]
    assert cli.json("request", "describe", request["id"], token=token)["lease_id"] == request["lease_id"]

    leases: list[dict[str, Any]] = cli.json("lease", "list", "--pool", world["pool"], "--live")
    (lease,) = leases
    assert lease["id"] == request["lease_id"] and lease["borrowed"] == {"gpu": 1}, "1 in share, 1 borrowed"
    table = cli.run("lease", "list", "--pool", world["pool"]).stdout
    assert lease["id"] in table and "granted" in table and "step=train" in table

    preempted = cli.json("lease", "preempt", lease["id"], "--message", "maintenance", "--grace", "20")
    assert preempted["state"] == "preempting" and preempted["preempt_deadline"]
    assert "preempting" in cli.run("lease", "describe", lease["id"]).stdout
    released = cli.json("lease", "release", lease["id"], token=token)
    assert released["state"] == "preempted"

    cancelled = cli.json("request", "create", "--gpu", "1", token=token)
    assert cli.json("request", "cancel", cancelled["id"], token=token)["state"] == "cancelled"

    events = cli.json("events", "list", "--subject", subject, "--limit", "50")
    kinds = [e["kind"] for e in events]
    assert {"submitted", "granted", "preempting", "preempted", "cancelled"} <= set(kinds), kinds
    only = cli.json("events", "list", "--subject", subject, "--kind", "granted")
    assert {e["kind"] for e in only} == {"granted"}
    later = cli.json("events", "list", "--subject", subject, "--after", str(events[-1]["id"]))
    assert later == []


def test_lease_list_shows_how_long_an_overdue_lease_has_overrun(cli: Cli, world: dict[str, str]) -> None:
    request = cli.json("request", "create", "--gpu", "1", "--wait", "10", token=world["token"])
    cli.json("lease", "preempt", request["lease_id"], "--grace", "0.1")
    deadline = time.monotonic() + 10
    while not cli.json("lease", "describe", request["lease_id"])["overdue_since"]:
        assert time.monotonic() < deadline, "the lease never became overdue"
        time.sleep(0.05)
    table = cli.run("lease", "list", "--pool", world["pool"], "--live").stdout
    assert re.search(r"preempting overdue \d+s", table), table


def test_reservation_commands(cli: Cli, world: dict[str, str]) -> None:
    pool, subject = world["pool"], world["subject"]
    created = cli.json(
        "reservation", "create", "--subject", subject, "--pool", pool, "--resource", "gpu=1",
        "--start", "+1h", "--end", "+3h", "--note", "eval",
    )  # fmt: skip
    assert created["id"].startswith("rsv_") and created["resources"] == {"gpu": 1}
    assert [r["id"] for r in cli.json("reservation", "list", "--pool", pool)] == [created["id"]]
    assert cli.json("reservation", "describe", created["id"])["note"] == "eval"
    cli.run("reservation", "delete", created["id"])
    assert cli.json("reservation", "list", "--pool", pool) == []
    bad = cli.run("reservation", "create", "--subject", subject, "--pool", pool, "--resource", "gpu=1",
                  "--start", "tomorrow", "--end", "+1h", code=2)  # fmt: skip
    assert "use now, +2h" in bad.output


def test_token_commands(cli: Cli, world: dict[str, str]) -> None:
    me = cli.json("whoami", token=world["token"])
    assert me["role"] == "subject" and me["subject"] == world["subject"]
    tokens = {t["id"]: t for t in cli.json("token", "list", "--subject", world["subject"])}
    assert [t["description"] for t in tokens.values()] == ["tests"]
    issued = cli.run("token", "create", "--role", "viewer").stdout
    assert "shown once" in issued
    cli.run("token", "delete", me["token_id"])
    cli.run("whoami", token=world["token"], code=1)


def test_refusals_and_unreachable_service_are_one_line(cli: Cli, world: dict[str, str]) -> None:
    missing = cli.run("pool", "describe", "no-such-pool", code=1)
    assert missing.stderr.startswith("error: 404: pool 'no-such-pool' does not exist")
    forbidden = cli.run("pool", "delete", world["pool"], token=world["token"], code=1)
    assert "error: 403:" in forbidden.stderr and "admin" in forbidden.stderr
    invalid = cli.run("pool", "create", "Bad_Name", code=1)
    assert "422" in invalid.stderr and "(field: name)" in invalid.stderr
    down = cli.run("pool", "list", "--url", "http://127.0.0.1:9", code=1)
    assert "unreachable" in down.stderr and "Traceback" not in down.output


def test_help_offers_every_group_and_shell_completion(cli: Cli) -> None:
    root = cli.run("--help").stdout
    for group in ("apply", "pool", "policy", "lease", "request", "reservation", "token", "events", "subject"):
        assert group in root
    assert "--install-completion" in root and "--show-completion" in root
