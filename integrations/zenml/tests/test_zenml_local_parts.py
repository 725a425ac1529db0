"""The pooled local orchestrator's parts that decide when a step must go, and the warm spare process,
against a real respools server (no ZenML pipeline needed)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from respools_server import RespoolsServer
from respools_zenml.leasing import LeaseArgs
from respools_zenml.local.supervisor import _LeaseWatch
from respools_zenml.local.warm import WarmSpare

import respools
from respools.model import RequestSpec


def _args(**fields: object) -> LeaseArgs:
    base = {
        "step_name": "train",
        "resources": {"gpu": 1},
        "preemptible": True,
        "priority": 0,
        "max_retries": 0,
        "pools": None,
        "gpu_class": None,
        "selectors": {},
        "labels": {},
        "idempotency_key": "k",
    }
    return LeaseArgs.model_validate(base | fields)


def test_a_lease_without_heartbeat_must_go_at_the_end_of_initialization_lease_seconds(
    respools_server: RespoolsServer,
) -> None:
    world = respools_server.world({"gpu": 1}, {"reserved": {"gpu": 1}})
    with respools.Client(world.url, world.token) as client:
        request = client.submit(RequestSpec(resources={"gpu": 1}, pools=[world.pool]), wait=5)
        assert request.lease_id is not None
        lease = client.get_lease(request.lease_id)  # granted; no heartbeat yet
        kill_at = _LeaseWatch(client, lease.id, _args(initialization_lease_s=30)).kill_at()
        assert kill_at == lease.granted_at.timestamp() + 30
        assert _LeaseWatch(client, lease.id, _args()).kill_at() is None  # the pool's window is the server's
        client.heartbeat(lease.id)  # started: no initialization window any more
        assert _LeaseWatch(client, lease.id, _args(initialization_lease_s=30)).kill_at() is None
        client.release(lease.id)


def test_reclaim_tolerance_any_stops_the_step_at_the_notice_coordinated_at_the_deadline(
    respools_server: RespoolsServer,
) -> None:
    world = respools_server.world({"gpu": 1}, {"reserved": {"gpu": 1}})
    with respools.Client(world.url, world.token) as client:
        request = client.submit(RequestSpec(resources={"gpu": 1}, preemptible=True, pools=[world.pool]), wait=5)
        assert request.lease_id is not None
        client.heartbeat(request.lease_id)
        respools_server.ok("POST", f"/v1/leases/{request.lease_id}/preempt", json={"grace_s": 60})
        lease = client.get_lease(request.lease_id)
        assert lease.preempt_deadline is not None
        coordinated = _LeaseWatch(client, lease.id, _args()).kill_at()
        assert coordinated == lease.preempt_deadline.timestamp()
        at_notice = _LeaseWatch(client, lease.id, _args(stop_at_notice=True)).kill_at()
        assert at_notice is not None and at_notice <= time.time()
        client.release(lease.id)


def test_a_warm_spare_runs_the_step_it_is_handed_and_the_next_one_boots(tmp_path: Path) -> None:
    script = tmp_path / "spare.py"
    script.write_text(
        "import json, os, sys\n"
        "order = json.loads(sys.stdin.readline())\n"
        "open(os.path.join(sys.argv[1], order['step_name']), 'w').write(str(os.getpid()))\n"
    )
    spare = WarmSpare([sys.executable, str(script), str(tmp_path)], {"PATH": "/usr/bin:/bin"})
    spare.prepare()
    first = spare.take({"step_name": "a"})
    assert first is not None and first.wait(30) == 0
    assert (tmp_path / "a").read_text() == str(first.pid)
    second = spare.take({"step_name": "b"})  # started when the first was taken
    assert second is not None and second.pid != first.pid and second.wait(30) == 0
    spare.close()
    assert spare.take({"step_name": "c"}) is None  # closed: nothing left behind, steps start cold
