"""Holder registrations: where they live and what they record."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from respools.backends.local import holders, register_holder, unregister_holder
from respools.backends.local.holders import HolderRegistry, holders_dir
from respools.model import PlacementItem
from tests.backends.helpers import HOST, fraction, make_lease

Spawn = Callable[..., subprocess.Popen[bytes]]


def test_directory_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(holders, "SHARED_RUN_DIR", tmp_path / "absent")

    assert holders_dir({"RESPOOLS_RUN_DIR": "/srv/respools"}) == Path("/srv/respools")
    assert holders_dir({"XDG_RUNTIME_DIR": "/run/user/1000"}) == Path("/run/user/1000/respools/holders")
    assert holders_dir({}).name == "holders" and f"respools-{os.getuid()}" in str(holders_dir({}))

    monkeypatch.setattr(holders, "SHARED_RUN_DIR", tmp_path)
    assert holders_dir({"XDG_RUNTIME_DIR": "/run/user/1000"}) == tmp_path, "the administrator's directory wins"


def test_register_records_this_hosts_devices(spawn: Spawn) -> None:
    workload = spawn()
    elsewhere = PlacementItem(host="gpu-b", gpu_uuid="GPU-b", gpu_index=0)
    lease = make_lease(fraction(250, 20389), elsewhere, lease_id="lease/with/slashes")

    path = register_holder(lease, pid=workload.pid)

    assert path.name == "lease_with_slashes.json"
    holder = HolderRegistry().get(lease.id)
    assert holder is not None
    assert (holder.pid, holder.pgid, holder.host, holder.pool) == (workload.pid, workload.pid, HOST, "lab")
    assert [item.host for item in holder.items] == [HOST]

    unregister_holder(lease.id)
    assert HolderRegistry().holders() == []
