"""``respools apply`` warns when a vertex pool promises more GPUs than the project's training quota."""

from __future__ import annotations

import uuid
from pathlib import Path

from typer.testing import CliRunner

from respools.cli import app
from respools.client import Client

POOL = """
pools:
  - name: vertex-{s}
    stack: vertex
    capacity: {{gpu: {capacity}}}
    settings: {{project: ml-prod, region: europe-west4, accelerator_type: NVIDIA_A100_80GB, gpu_quota: 8}}
"""


def apply(admin: Client, tmp_path: Path, capacity: int) -> str:
    path = tmp_path / "pools.yaml"
    path.write_text(POOL.format(s=uuid.uuid4().hex[:8], capacity=capacity))
    result = CliRunner().invoke(
        app, ["apply", "-f", str(path), "--url", admin.url, "--token", admin.config.token or ""], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def test_apply_warns_when_a_pool_promises_more_than_the_quota(admin: Client, tmp_path: Path) -> None:
    said = apply(admin, tmp_path, capacity=16)
    assert "warning: pool 'vertex-" in said
    assert "promises 16 GPUs but the NVIDIA_A100_80GB training quota in europe-west4 is 8" in said
    assert "Applied 1 change(s)." in said


def test_apply_says_nothing_of_a_pool_within_its_quota(admin: Client, tmp_path: Path) -> None:
    assert "warning" not in apply(admin, tmp_path, capacity=8)
