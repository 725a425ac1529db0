"""``make demo`` end to end: the script starts its own service, applies the example pools, runs the two
teams' steps through borrowing, preemption, requeue and resume, reports, and stops, in under a minute."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_demo_tells_the_whole_story_in_under_a_minute(tmp_path: Path) -> None:
    summary_path = tmp_path / "summary.json"
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "demo.py"), "--summary-json", str(summary_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, f"stdout:\n{result.stdout[-4000:]}\nstderr:\n{result.stderr[-4000:]}"
    summary = json.loads(summary_path.read_text())
    assert summary["problems"] == []
    assert summary["seconds"] < 60
    train, score = summary["steps"]
    assert train["borrowed_gpus"] == 2 and train["preemptions"] == ["reclaim"]
    assert train["attempts"] == 2 and train["resumed_from"] is not None and train["result"] == "finished 8/8 epochs"
    assert len(set(train["lease_ids"])) == 2, "the rerun holds a new lease for the same request"
    assert score["attempts"] == 1 and score["result"] == "scored the batch"
    kinds = summary["event_kinds"]
    for kind in ("submitted", "granted", "preempting", "preempted", "requeued", "released"):
        assert kind in kinds, kinds
    assert kinds.index("preempting") < kinds.index("requeued")

    out = result.stdout
    assert "Applied 7 change(s)." in out and "No changes." in out, "applied, then idempotent"
    assert "LeasePreempted (reclaim): checkpoint written at epoch" in out
    assert "resuming from the checkpoint at epoch" in out
    assert "Event log" in out and "Dashboard: http://127.0.0.1:" in out
    assert "service stopped" in out
    assert "rp_" not in out.split("Dashboard:")[0], "no team token secret is printed"
