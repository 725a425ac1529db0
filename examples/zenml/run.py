"""Run ``training.py``'s pipeline on a respools pool, from scratch or on your own setup.

    python examples/zenml/run.py            # throwaway respools server + ZenML store, one-GPU pool
    python examples/zenml/run.py --preempt  # … and a higher-priority job preempts ``train`` midway

Without ``RESPOOLS_URL`` it starts ``respools server`` on a free port (SQLite in a temporary directory),
defines a pool ``demo-gpus`` with one GPU and a team with a policy on it, points ZenML at a temporary
store, registers the pooled orchestrator flavors and makes a stack of ``respools_local`` and the default
artifact store. With ``RESPOOLS_URL`` and ``RESPOOLS_TOKEN`` set, and a stack whose orchestrator is
``respools_local`` active, it only runs the pipeline (``--pool`` names the pool).

Nothing here needs a GPU: a pool without an inventory only counts GPUs, so the steps run anyway.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from respools.server.process import ServerProcess

HERE = Path(__file__).resolve().parent
ADMIN_TOKEN = "rp_example_admin"
POOL = "demo-gpus"
TEAM = "ml-team"


def start_server(workdir: Path) -> ServerProcess:
    return ServerProcess(
        database_url=f"sqlite:///{workdir / 'respools.db'}",
        admin_token=ADMIN_TOKEN,
        log=workdir / "respools-server.log",
        env={"RESPOOLS_LOG_LEVEL": "WARNING", "RESPOOLS_LOG_JSON": "false"},
    ).start()


def define_pool(url: str) -> str:
    """The platform team's part: a one-GPU pool, a team with a policy on it, and the team's token."""
    admin = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=10)
    admin.put(f"/v1/pools/{POOL}", json={"name": POOL, "capacity": {"gpu": 1}, "preemption_grace_s": 30})
    admin.put(f"/v1/subjects/{TEAM}", json={"name": TEAM}).raise_for_status()
    admin.post("/v1/policies", json={"subject": TEAM, "pool": POOL, "reserved": {"gpu": 1}, "priority": 10})
    token: str = admin.post("/v1/tokens", json={"role": "subject", "subject": TEAM}).json()["token"]
    return token


def make_stack(url: str, token: str, pool: str) -> None:
    import respools_zenml
    from zenml.client import Client
    from zenml.enums import StackComponentType

    respools_zenml.register_flavors()
    client = Client()
    client.create_stack_component(
        name="pooled",
        flavor="respools_local",
        component_type=StackComponentType.ORCHESTRATOR,
        configuration={"respools_url": url, "respools_token": token, "pool": pool},
    )
    components = {StackComponentType.ORCHESTRATOR: "pooled", StackComponentType.ARTIFACT_STORE: "default"}
    client.create_stack(name="pooled", components=components)
    client.activate_stack("pooled")


def preempt_train_midway(url: str, token: str, pool: str) -> None:
    """Another job of the team, with a higher request priority, takes the GPU for a few seconds."""
    import respools

    client = respools.Client(url, token)
    while not any(  # the train step's process holds its lease (its first heartbeat made it active)
        lease.labels.get("step") == "train" and lease.state.value == "active"
        for lease in client.list_leases(pool=pool, live=True)
    ):
        time.sleep(0.2)
    time.sleep(2)
    print(">>> an urgent job (priority 10) asks for the GPU")
    with respools.lease(gpu=1, pool=pool, priority=10, client=client, progress=False) as urgent:
        print(f">>> urgent job holds {urgent.id}; running 3 s")
        time.sleep(3)
    print(">>> urgent job done")


def report() -> None:
    from zenml.client import Client

    client = Client()
    run = client.get_pipeline_run(client.list_pipeline_runs(sort_by="desc:created", size=1).items[0].id)
    print(f"\nrun {run.name}: {run.status.value}")
    for step_run in client.list_run_steps(pipeline_run_id=run.id, sort_by="asc:created", size=50).items:
        lease: dict[str, Any] = client.get_run_step(step_run.id).run_metadata.get("respools") or {}  # type: ignore[assignment]
        where = f"lease {lease['lease_id']} on {lease['pool']}, attempt {lease['attempt'] + 1}" if lease else "no lease"
        notice = f", preempted ({lease['preempted']['reason']})" if lease.get("preempted") else ""
        print(f"  {step_run.name:<14} {step_run.status.value:<10} {where}{notice}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preempt", action="store_true", help="preempt the train step midway")
    parser.add_argument("--pool", default=POOL, help="pool to use with your own RESPOOLS_URL")
    options = parser.parse_args()
    server: ServerProcess | None = None
    with tempfile.TemporaryDirectory(prefix="respools-zenml-example-") as tmp:
        if os.environ.get("RESPOOLS_URL"):
            url, token, pool = os.environ["RESPOOLS_URL"], os.environ.get("RESPOOLS_TOKEN", ""), options.pool
        else:
            os.environ.setdefault("ZENML_CONFIG_PATH", str(Path(tmp) / "zenml"))
            os.environ.setdefault("ZENML_ANALYTICS_OPT_IN", "false")
            server = start_server(Path(tmp))
            url = server.url
            token, pool = define_pool(url), POOL
            make_stack(url, token, pool)
        try:
            if options.preempt:
                threading.Thread(target=preempt_train_midway, args=(url, token, pool), daemon=True).start()
            sys.path.insert(0, str(HERE))
            from training import training_pipeline

            training_pipeline()
            report()
        finally:
            if server is not None:
                server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
