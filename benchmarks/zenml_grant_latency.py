"""Grant → step code: how long after respools grants a ZenML step's lease the step's function runs, on the
pooled local orchestrator, and where that time goes.

The script starts ``respools server`` (SQLite in a temporary directory), defines a one-GPU pool, and runs
a real ZenML pipeline (a private ZenML store in a temporary directory) of ``--steps`` sequential pooled
steps, ``--runs`` times. The pool is free, so each step is granted at once. Per step, against the
lease's ``granted_at`` (the reconciler's transaction time; same machine, so the clocks agree):

* **held**: the lease's first heartbeat (``started_at``): the step's process started, imported ZenML,
  created the step run and entered the lease in ``prepare_step_run``;
* **code**: the step function's first line.

Two ways to start the step's process, interleaved run by run: **cold**, at the grant (as before
``warm_step_process``), and **warm**, a spare started ahead that only needs to be told the step
(:mod:`respools_zenml.local.warm`). The first step of a run finds its spare still booting when it is
granted at once; later steps find it ready if the previous step ran longer than a boot (``--hold``).

    python benchmarks/zenml_grant_latency.py                 # a table
    python benchmarks/zenml_grant_latency.py --json          # one JSON object
    python benchmarks/zenml_grant_latency.py --runs 3 --steps 3 --hold 10 --mode both

Times on a loaded machine swing with the neighbours; compare phases, and runs taken together.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

import httpx

ADMIN = "rp_bench_admin"
PIPELINE = Path(__file__).with_name("zenml_grant_latency_pipeline.py")
"""The pipeline, run in a child process with a ZenML store of its own (its steps live at module level, where
ZenML's step processes import them from)."""
QUIET = {
    "ZENML_ANALYTICS_OPT_IN": "false",
    "ZENML_LOGGING_VERBOSITY": "WARN",
    "ZENML_ENABLE_RICH_TRACEBACK": "false",
    "AUTO_OPEN_DASHBOARD": "false",
}


# -- the measurement --------------------------------------------------------------------------------------


@dataclass
class Sample:
    mode: str
    index: int
    """The step's place in its run: the first step's spare starts with the run, later ones while the
    previous step runs."""
    held_ms: float
    code_ms: float


@dataclass
class Report:
    runs: int
    steps: int
    hold_s: float
    cpu_count: int
    load_1m: float
    python: str
    median_code_ms: dict[str, dict[str, float]]
    """mode → ``first`` step / ``later`` steps → median ms from grant to the step's first line."""
    samples: list[Sample]


def _ts(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()


def measure(runs: int, steps: int, hold_s: float, modes: list[str]) -> Report:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
    from respools.server.process import ServerProcess

    workdir = Path(tempfile.mkdtemp(prefix="respools-grant-latency-"))
    server = ServerProcess(
        database_url=f"sqlite:///{workdir / 'respools.db'}",
        admin_token=ADMIN,
        log=workdir / "server.log",
        env={"RESPOOLS_LOG_JSON": "false", "RESPOOLS_LOG_LEVEL": "WARNING"},
        inherit_env=False,
    ).start(wait=True)
    samples: list[Sample] = []
    try:
        admin = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30)
        suffix = uuid.uuid4().hex[:6]
        pool, subject = f"bench-{suffix}", f"team-{suffix}"
        admin.put(f"/v1/pools/{pool}", json={"name": pool, "capacity": {"gpu": 1}}).raise_for_status()
        admin.put(f"/v1/subjects/{subject}", json={"name": subject}).raise_for_status()
        admin.post("/v1/policies", json={"subject": subject, "pool": pool, "reserved": {"gpu": 1}}).raise_for_status()
        token = admin.post("/v1/tokens", json={"role": "subject", "subject": subject}).json()["token"]
        for run in range(runs):
            for mode in modes:  # interleaved, so both see the same neighbours
                out = workdir / f"run-{run}-{mode}.json"
                zenml_home = workdir / f"zenml-{run}-{mode}"
                env = {**os.environ, **QUIET, "ZENML_CONFIG_PATH": str(zenml_home), "RESPOOLS_CONFIG": ""}
                argv = [sys.executable, str(PIPELINE), server.url, token, pool, str(steps), str(hold_s), mode, str(out)]
                subprocess.run(argv, env=env, check=True, cwd=PIPELINE.parent)  # ZenML finds the steps from there
                for probe in json.loads(out.read_text()):
                    lease = admin.get(f"/v1/leases/{probe['lease_id']}").json()
                    granted = _ts(lease["granted_at"])
                    held = 1000 * (_ts(lease["started_at"]) - granted)
                    samples.append(
                        Sample(mode, probe["index"], round(held, 1), round(1000 * (probe["code"] - granted), 1))
                    )
        admin.close()
    finally:
        server.stop()
    medians: dict[str, dict[str, float]] = {}
    for mode in modes:
        first = [s.code_ms for s in samples if s.mode == mode and s.index == 0]
        later = [s.code_ms for s in samples if s.mode == mode and s.index > 0]
        medians[mode] = {
            name: round(statistics.median(values), 1) for name, values in (("first", first), ("later", later)) if values
        }
    return Report(
        runs=runs,
        steps=steps,
        hold_s=hold_s,
        cpu_count=os.cpu_count() or 0,
        load_1m=os.getloadavg()[0],
        python=sys.version.split()[0],
        median_code_ms=medians,
        samples=samples,
    )


def print_table(report: Report) -> None:
    print(
        f"grant → step function's first line on respools_local ({report.runs} run(s) × {report.steps} steps of "
        f"{report.hold_s:g} s, {report.cpu_count} CPUs, load {report.load_1m:.1f}, Python {report.python})"
    )
    header = f"{'step process':<30} {'first step ms':>14} {'later steps ms':>15}"
    print(header)
    print("-" * len(header))
    labels = {"cold": "started at the grant (cold)", "warm": "started ahead (warm spare)"}
    for mode, medians in report.median_code_ms.items():
        first, later = medians.get("first"), medians.get("later")
        print(
            f"{labels[mode]:<30} {first if first is not None else float('nan'):>14.1f} "
            f"{later if later is not None else float('nan'):>15.1f}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--hold", type=float, default=10.0, help="seconds each step runs")
    parser.add_argument("--mode", choices=["cold", "warm", "both"], default="both")
    args = parser.parse_args(argv)
    modes = ["cold", "warm"] if args.mode == "both" else [args.mode]
    report = measure(args.runs, args.steps, args.hold, modes)
    if args.json:
        print(json.dumps(asdict(report)))
    else:
        print_table(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
