"""``respools apply`` against a real service: idempotence, the dry-run diff, pruning, and errors that
point at the file's line and field, whether the file or the server found them."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pytest

from tests.cli.conftest import Cli, ServiceFactory

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

TEMPLATE = """\
pools:
  - name: gpus-{s}
    capacity: {{gpu: 8}}
    preemption_grace_s: 30
subjects:
  - name: team-{s}
policies:
  - subject: team-{s}
    pool: gpus-{s}
    reserved: {{gpu: 2}}
    limit: {{gpu: 6}}
    priority: 10
reservations:
  - name: eval-{s}
    subject: team-{s}
    pool: gpus-{s}
    resources: {{gpu: 1}}
    start: 2031-01-01T00:00:00Z
    end: 2031-01-02T00:00:00Z
tokens:
  - {{name: ci-{s}, role: subject, subject: team-{s}}}
"""


def write(tmp_path: Path, text: str, name: str = "pools.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def suffix() -> str:
    return uuid.uuid4().hex[:6]


@pytest.mark.slow  # the service loads the Kubernetes, Vertex and Databricks client libraries on first use
def test_mixed_fleet_example_applies_and_second_apply_changes_nothing(cli: Cli) -> None:
    """The example file (local inventory, Kubernetes MIG nodes, Vertex quota, Databricks) is accepted by a
    real service with every backend installed, and applying it again finds nothing to change."""
    first = cli.json("apply", "-f", str(EXAMPLES / "pools.yaml"))
    assert {c["action"] for c in first["changes"]} == {"create"}
    assert len(first["tokens"]) == 4 and all(t["token"].startswith("rp_") for t in first["tokens"])
    second = cli.run("apply", "-f", str(EXAMPLES / "pools.yaml"))
    assert "No changes." in second.stdout
    again = cli.json("apply", "-f", str(EXAMPLES / "pools.yaml"))
    assert again["changes"] == [] and again["tokens"] == []
    pools = {p["name"]: p for p in cli.json("pool", "list")}
    assert pools["k8s-train"]["inventory"][0]["gpus"][0]["mig_instances"][0]["profile"] == "3g.40gb"
    assert set(pools["vertex-a100"]["forms"]) == {"whole"}, "the server filled in what the stack expresses"


def test_dry_run_shows_the_diff_and_changes_nothing(cli: Cli, tmp_path: Path) -> None:
    s = suffix()
    path = write(tmp_path, TEMPLATE.format(s=s))
    created = cli.run("apply", "-f", str(path), "--dry-run")
    assert f"+ pool gpus-{s}" in created.stdout and "would be made" in created.stdout
    assert cli.json("policy", "list", "--pool", f"gpus-{s}") == [], "a dry run creates nothing"

    cli.run("apply", "-f", str(path))
    write(tmp_path, TEMPLATE.format(s=s).replace("reserved: {gpu: 2}", "reserved: {gpu: 3}"))
    diff = cli.run("apply", "-f", str(path), "--dry-run")
    assert f"~ policy team-{s}@gpus-{s}" in diff.stdout
    assert "reserved.gpu: 2 → 3" in diff.stdout
    assert "1 to update; 4 unchanged." in diff.stdout
    plan = cli.json("apply", "-f", str(path), "--dry-run")
    assert plan["changes"] == [
        {
            "action": "update",
            "kind": "policy",
            "name": f"team-{s}@gpus-{s}",
            "fields": [{"field": "reserved.gpu", "before": 2.0, "after": 3.0}],
        }
    ]
    (policy,) = cli.json("policy", "list", "--pool", f"gpus-{s}")
    assert policy["reserved"] == {"gpu": 2}, "still the old value after the dry run"

    cli.run("apply", "-f", str(path))
    (policy,) = cli.json("policy", "list", "--pool", f"gpus-{s}")
    assert policy["reserved"] == {"gpu": 3}
    assert "No changes." in cli.run("apply", "-f", str(path)).stdout


def test_changed_reservation_and_token_are_replaced(cli: Cli, tmp_path: Path) -> None:
    s = suffix()
    path = write(tmp_path, TEMPLATE.format(s=s))
    first = cli.json("apply", "-f", str(path))
    (old_reservation,) = cli.json("reservation", "list", "--pool", f"gpus-{s}")
    write(
        tmp_path,
        TEMPLATE.format(s=s)
        .replace("resources: {gpu: 1}", "resources: {gpu: 2}")
        .replace("role: subject, subject", "role: subject, description: rotated, subject"),
    )
    result = cli.json("apply", "-f", str(path))
    assert [(c["action"], c["kind"]) for c in result["changes"]] == [("replace", "reservation"), ("replace", "token")]
    (reservation,) = cli.json("reservation", "list", "--pool", f"gpus-{s}")
    assert reservation["id"] != old_reservation["id"] and reservation["resources"] == {"gpu": 2}
    assert reservation["note"] == f"[apply:eval-{s}]"
    # The old token was revoked; the new one works.
    cli.run("whoami", token=first["tokens"][0]["token"], code=1)
    assert cli.json("whoami", token=result["tokens"][0]["token"])["subject"] == f"team-{s}"


def test_prune_removes_what_the_file_no_longer_names(start_service: ServiceFactory, tmp_path: Path) -> None:
    cli = start_service()  # its own service: pruning removes everything the file does not name
    s = suffix()
    full = TEMPLATE.format(s=s) + f"  - {{name: viewer-{s}, role: viewer}}\n"
    path = write(tmp_path, full)
    cli.run("apply", "-f", str(path))
    other = f"""\
pools:
  - name: spare-{s}
    capacity: {{gpu: 2}}
subjects:
  - name: team-{s}
tokens:
  - {{name: viewer-{s}, role: viewer}}
"""
    write(tmp_path, other)
    kept = cli.json("apply", "-f", str(path), "--dry-run")
    assert {c["action"] for c in kept["changes"]} == {"create"}, "without --prune nothing is deleted"

    plan = cli.json("apply", "-f", str(path), "--prune", "--dry-run")
    assert sorted((c["action"], c["kind"], c["name"]) for c in plan["changes"]) == [
        ("create", "pool", f"spare-{s}"),
        ("delete", "policy", f"team-{s}@gpus-{s}"),
        ("delete", "pool", f"gpus-{s}"),
        ("delete", "reservation", f"eval-{s}"),
        ("delete", "token", f"ci-{s}"),
    ]
    cli.run("apply", "-f", str(path), "--prune")
    assert [p["name"] for p in cli.json("pool", "list")] == [f"spare-{s}"]
    assert cli.json("policy", "list") == []
    assert cli.json("reservation", "list") == []
    tokens = cli.json("token", "list")
    assert {t["role"] for t in tokens} == {"admin", "viewer"}, "the admin token nobody's file names stays"
    assert "No changes." in cli.run("apply", "-f", str(path), "--prune").stdout


def location(stderr: str) -> list[tuple[int, str]]:
    """(line, field) of every ``file:line:col: field: message`` line."""
    return [(int(m[1]), m[2]) for m in re.finditer(r"pools\.yaml:(\d+):\d+: (\S+):", stderr)]


def test_file_errors_point_at_line_and_field(cli: Cli, tmp_path: Path) -> None:
    s = suffix()
    text = (
        TEMPLATE.format(s=s)
        .replace("capacity: {gpu: 8}", "capacity: {gpu: 8, GPU: 1}")
        .replace("priority: 10", "priority: ten")
        .replace("end: 2031-01-02T00:00:00Z", "end: 2030-01-02T00:00:00Z")
    )
    result = cli.run("apply", "-f", str(write(tmp_path, text)), code=1)
    assert location(result.stderr) == [
        (3, "pools[0].capacity.GPU"),
        (12, "policies[0].priority"),
        (19, "reservations[0].end"),
    ]
    assert "invalid resource key 'GPU'" in result.stderr
    assert "end must be after start" in result.stderr
    assert "   3 |     capacity: {gpu: 8, GPU: 1}" in result.stderr, "the offending line is quoted"
    assert cli.json("pool", "list") is not None and not any(
        p["name"] == f"gpus-{s}" for p in cli.json("pool", "list")
    ), "nothing was applied"


def test_unknown_references_point_at_their_line(cli: Cli, tmp_path: Path) -> None:
    s = suffix()
    text = TEMPLATE.format(s=s).replace(f"    pool: gpus-{s}\n    reserved", f"    pool: nowhere-{s}\n    reserved")
    result = cli.run("apply", "-f", str(write(tmp_path, text)), code=1)
    assert location(result.stderr) == [(9, "policies[0].pool")]
    assert f"pool 'nowhere-{s}' is neither in this file nor on the server" in result.stderr


@pytest.mark.parametrize(
    ("change", "line", "field", "words"),
    [
        # The server checks reserved shares against the pool's capacity: a refusal with field reserved.gpu.
        (("capacity: {gpu: 8}", "capacity: {gpu: 1}"), 10, "policies[0].reserved.gpu", "more than its capacity"),
        # Only the server knows which stacks have a backend installed.
        (("preemption_grace_s: 30", "preemption_grace_s: 30\n    stack: slurm"), 5, "pools[0].stack", "slurm"),
    ],
)
def test_server_refusals_point_at_line_and_field(
    cli: Cli, tmp_path: Path, change: tuple[str, str], line: int, field: str, words: str
) -> None:
    s = suffix()
    text = TEMPLATE.format(s=s).replace(*change)
    result = cli.run("apply", "-f", str(write(tmp_path, text)), code=1)
    assert location(result.stderr) == [(line, field)], result.stderr
    assert words in result.stderr and "was refused (422)" in result.stderr
    assert "fix the file and apply again" in result.stderr


def test_apply_reads_stdin_and_reports_json(cli: Cli) -> None:
    s = suffix()
    result = cli.run("apply", "-f", "-", "-o", "json", input=f"subjects:\n  - name: stdin-{s}\n")
    assert json.loads(result.stdout)["changes"] == [
        {"action": "create", "kind": "subject", "name": f"stdin-{s}", "fields": []}
    ]


def test_a_refused_change_leaves_the_service_as_it_was(cli: Cli, tmp_path: Path) -> None:
    """The policy (third in the plan) reserves more than the pool holds: the pool and subject before it,
    and the reservation and token after it, are not applied either; the same file fixed applies whole."""
    s = suffix()
    before = {kind: cli.json(kind, "list") for kind in ("pool", "subject", "token")}
    bad = TEMPLATE.format(s=s).replace("reserved: {gpu: 2}", "reserved: {gpu: 9}").replace("limit: {gpu: 6}", "")
    result = cli.run("apply", "-f", str(write(tmp_path, bad)), code=1)
    assert "Nothing was applied" in result.stderr and "was refused (422)" in result.stderr
    assert {kind: cli.json(kind, "list") for kind in ("pool", "subject", "token")} == before
    applied = cli.json("apply", "-f", str(write(tmp_path, TEMPLATE.format(s=s))))
    assert len(applied["changes"]) == 5 and len(applied["tokens"]) == 1


def test_zero_limits_and_capacities_are_kept_through_apply_and_the_store(cli: Cli, tmp_path: Path) -> None:
    """DESIGN §2.1: a zero is a zero. A limit of 0 and a capacity of 0 go through the file, the API and
    the store and come back as 0 (not dropped, which would read as "no limit"), a second apply finds
    nothing to change, and a request for the forbidden key is rejected, not granted."""
    s = suffix()
    text = f"""\
pools:
  - name: zeros-{s}
    capacity: {{gpu: 4, mcpu: 0}}
subjects:
  - name: team-{s}
policies:
  - subject: team-{s}
    pool: zeros-{s}
    reserved: {{gpu: 0}}
    limit: {{gpu: 0}}
tokens:
  - {{name: ci-{s}, role: subject, subject: team-{s}}}
"""
    path = write(tmp_path, text)
    first = cli.json("apply", "-f", str(path))
    assert cli.json("apply", "-f", str(path))["changes"] == []
    policy = cli.json("policy", "describe", f"team-{s}", f"zeros-{s}")
    assert policy["limit"] == {"gpu": 0} and policy["reserved"] == {"gpu": 0}
    (pool,) = [p for p in cli.json("pool", "list") if p["name"] == f"zeros-{s}"]
    assert pool["capacity"] == {"gpu": 4, "mcpu": 0}
    assert first["changes"]
