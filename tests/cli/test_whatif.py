"""``respools trace`` and ``respools simulate`` as a user runs them: a trace generated, exported from a real
service's history, replayed against two definitions files, as a table, JSON and an HTML report."""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import respools
from respools.client import Client
from respools.whatif.trace import TraceJob, read_trace, write_trace
from tests.cli.conftest import Cli

DEFINITIONS = """\
version: 1
pools:
  - {{name: fleet, capacity: {{gpu: 16}}, preemption_grace_s: 60}}
subjects: [{{name: team-1}}, {{name: team-2}}]
policies:
  - {{subject: team-1, pool: fleet, priority: 10, reserved: {{gpu: {one}}}}}
  - {{subject: team-2, pool: fleet, priority: 10, reserved: {{gpu: {two}}}}}
"""


def test_generate_then_simulate_two_definitions_side_by_side(cli: Cli, tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    cli.run(
        "trace",
        "generate",
        "-o",
        str(trace),
        "--gpus",
        "16",
        "--jobs",
        "120",
        "--days",
        "0.5",
        "--subject",
        "team-1",
        "--subject",
        "team-2",
    )
    jobs = read_trace(trace)
    assert len(jobs) == 120 and {j.subject for j in jobs} == {"team-1", "team-2"}
    even, skewed = tmp_path / "even.yaml", tmp_path / "skewed.yaml"
    even.write_text(DEFINITIONS.format(one=8, two=8))
    skewed.write_text(DEFINITIONS.format(one=14, two=2))
    report = tmp_path / "report.html"

    out = json.loads(
        cli.run("simulate", str(trace), "-f", str(even), "-f", str(skewed), "--json", "--html", str(report)).stdout
    )

    assert [r["label"] for r in out["runs"]] == ["even.yaml", "skewed.yaml"]
    for run in out["runs"]:
        steps = sum(s["jobs"] for s in run["subjects"])
        assert steps == 120
        assert 0 < run["utilization"] <= 1 and 0 < run["reference_utilization"] <= 1
    entitled = {r["label"]: {s["subject"]: s["entitlement"] for s in r["subjects"]} for r in out["runs"]}
    assert entitled == {"even.yaml": {"team-1": 0.5, "team-2": 0.5}, "skewed.yaml": {"team-1": 0.875, "team-2": 0.125}}
    page = report.read_text()
    assert page.count("<svg") == 3 and "<script" not in page and "http://" not in page.split("<svg", 1)[0]
    table = cli.run("simulate", str(trace), "-f", str(even)).stdout
    assert "work-conserving" in table and "team-2" in table


def test_a_bad_trace_line_is_named_with_its_field(cli: Cli, tmp_path: Path) -> None:
    trace = tmp_path / "bad.jsonl"
    good = {"submit_s": 0, "subject": "a", "resources": {"gpu": 1}, "runtime_s": 10}
    bad = {"submit_s": 1, "subject": "a", "resources": {"gpu": 1}, "runtime_s": 1e308}
    trace.write_text(f"{json.dumps(good)}\n{json.dumps(bad)}\n")
    defs = tmp_path / "d.yaml"
    defs.write_text(DEFINITIONS.format(one=8, two=8))
    result = cli.run("simulate", str(trace), "-f", str(defs), code=1)
    assert "bad.jsonl:2: runtime_s" in result.stderr


def test_trace_export_writes_the_services_history_and_replays_it(cli: Cli, tmp_path: Path) -> None:
    suffix = uuid.uuid4().hex[:8]
    pool, subject = f"export-{suffix}", f"team-{suffix}"
    defs = tmp_path / "defs.yaml"
    defs.write_text(
        f"version: 1\npools: [{{name: {pool}, capacity: {{gpu: 2}}}}]\nsubjects: [{{name: {subject}}}]\n"
        f"policies: [{{subject: {subject}, pool: {pool}, reserved: {{gpu: 2}}}}]\n"
    )
    cli.run("apply", "-f", str(defs))
    token = cli.json("token", "create", "--role", "subject", "--subject", subject)["token"]
    since = datetime.now(UTC) - timedelta(seconds=1)
    with Client(cli.url, token) as client:
        for gpu, hold in ((2, 0.6), (1, 0.3)):
            with respools.lease(gpu=gpu, preemptible=True, max_retries=2, client=client, progress=False):
                time.sleep(hold)
    out = tmp_path / "history.jsonl"

    printed = cli.run("trace", "export", "-o", str(out), "--since", since.isoformat()).stdout

    jobs = [j for j in read_trace(out) if j.subject == subject]
    assert "step(s) written" in printed
    assert [(j.resources["gpu"], j.preemptible, j.max_retries) for j in jobs] == [(2000, True, 2), (1000, True, 2)]
    assert 0.55 < jobs[0].runtime_s < 5 and 0.25 < jobs[1].runtime_s < 5
    assert 0 < jobs[0].submit_s < jobs[1].submit_s
    replay_out = json.loads(cli.run("simulate", str(out), "-f", str(defs), "--json").stdout)
    (run,) = replay_out["runs"]
    assert next(s for s in run["subjects"] if s["subject"] == subject)["done"] == 2


def test_csv_and_jsonl_write_the_same_trace(tmp_path: Path) -> None:
    jobs = [
        TraceJob(
            id="a",
            submit_s=1.5,
            subject="team-1",
            pools=("p", "q"),
            resources={"gpu": 0.5, "mcpu": 4000},
            replicas=2,
            runtime_s=60,
            preemptible=True,
            priority=-3,
            max_retries=2,
            checkpoint_s=30,
        ),
        TraceJob(id="b", submit_s=0, subject="team-2", resources={"gpu": 1}, runtime_s=5),
    ]
    for name in ("t.csv", "t.jsonl"):
        write_trace(jobs, tmp_path / name)
    assert read_trace(tmp_path / "t.csv") == read_trace(tmp_path / "t.jsonl") == [jobs[1], jobs[0]]
