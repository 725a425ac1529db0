"""Preemption delay: how long after the scheduler decides to preempt a lease the step holding it sees
:class:`respools.LeasePreempted`.

The script starts ``respools server`` (SQLite in a temporary directory) and repeats one round per sample:
a step holds a preemptible one-GPU lease in-process, a higher-priority request of the same subject
arrives, the reconciler preempts the step's lease. Two moments are measured against the decision (the
server's ``preempting`` event, stamped with the reconciler's transaction time):

* **heard**: the lease's background thread receives the notice (its long-poll wakes);
* **raised**: the step's own code catches ``LeasePreempted``.

Two kinds of step: a busy Python loop (the exception is raised between bytecodes) and one waiting in
``lease.sleep()`` (woken by the notice). Same machine, so server and client clocks agree.

    python benchmarks/preemption_delay.py               # a table
    python benchmarks/preemption_delay.py --json        # one JSON object
    python benchmarks/preemption_delay.py --rounds 50
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

SRC = str(Path(__file__).resolve().parent.parent / "src")
sys.path.insert(0, SRC)

import respools  # noqa: E402
from respools.client import Client, LeasePreempted, LeaseSession  # noqa: E402
from respools.model import EventKind, RequestSpec, RequestState  # noqa: E402

ADMIN_TOKEN = "rp_bench_" + uuid.uuid4().hex
STEP_TIMEOUT_S = 30.0


@dataclass
class Stats:
    p50_ms: float
    p95_ms: float
    max_ms: float


@dataclass
class Workload:
    name: str
    rounds: int
    heard: Stats
    raised: Stats


@dataclass
class Report:
    workloads: list[Workload] = field(default_factory=list)
    store: str = "sqlite"
    cpu_count: int = field(default_factory=lambda: os.cpu_count() or 0)
    python: str = field(default_factory=lambda: sys.version.split()[0])


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def stats(samples_s: list[float]) -> Stats:
    ms = [s * 1000 for s in samples_s]
    return Stats(round(percentile(ms, 0.5), 1), round(percentile(ms, 0.95), 1), round(max(ms), 1))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def server(directory: Path) -> Iterator[str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = os.environ | {
        "PYTHONPATH": SRC,
        "RESPOOLS_DATABASE_URL": f"sqlite:///{directory / 'respools.db'}",
        "RESPOOLS_ADMIN_TOKEN": ADMIN_TOKEN,
        "RESPOOLS_RUN_DIR": str(directory / "server-holders"),
    }
    command = [sys.executable, "-c", "from respools.cli import app; app()", "server", "--port", str(port)]
    with (directory / "server.log").open("wb") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"server did not start:\n{(directory / 'server.log').read_text()[-2000:]}")
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(10)


def define_world(url: str) -> Client:
    with Client(url, ADMIN_TOKEN) as admin:
        admin.put("/v1/pools/bench", {"name": "bench", "capacity": {"gpu": 1}, "preemption_grace_s": 30})
        admin.put("/v1/subjects/bench", {"name": "bench"})
        admin.post("/v1/policies", {"subject": "bench", "pool": "bench", "reserved": {"gpu": 1}})
        token = admin.post("/v1/tokens", {"role": "subject", "subject": "bench"})["token"]
    return Client(url, token)


def busy_loop(session: LeaseSession) -> None:
    end = time.monotonic() + STEP_TIMEOUT_S
    while time.monotonic() < end:
        pass


def sleeping(session: LeaseSession) -> None:
    session.sleep(STEP_TIMEOUT_S)


def one_round(client: Client, step: Callable[[LeaseSession], None]) -> tuple[float, float]:
    """Hold, get preempted by a higher-priority request, and answer (heard, raised) after the decision."""
    session = respools.lease(gpu=1, preemptible=True, client=client, progress=False)
    preemptor = None
    try:
        with session:
            preemptor = client.submit(RequestSpec(resources={"gpu": 1}, priority=5))
            step(session)
        raise RuntimeError(f"no preemption within {STEP_TIMEOUT_S} s")
    except LeasePreempted:
        raised_at = time.time()
    finally:
        if preemptor is not None:
            client.wait_request(preemptor.id, state=RequestState.PENDING, timeout=10)
            client.cancel_request(preemptor.id)
    (event,) = client.events(lease_id=session.id, kinds=[EventKind.PREEMPTING])
    decided = event.at.timestamp()
    heard = session.noticed_at
    assert heard is not None
    return heard - decided, raised_at - decided


def measure(client: Client, name: str, step: Callable[[LeaseSession], None], rounds: int) -> Workload:
    heard: list[float] = []
    raised: list[float] = []
    for _ in range(rounds):
        h, r = one_round(client, step)
        heard.append(h)
        raised.append(r)
    return Workload(name, rounds, stats(heard), stats(raised))


def print_table(report: Report) -> None:
    print(f"preemption delay from the scheduler's decision (SQLite, {report.cpu_count} CPUs, Python {report.python})")
    header = f"{'step':<22} {'rounds':>6}  {'heard p50/p95/max (ms)':>24}  {'raised p50/p95/max (ms)':>25}"
    print(header)
    print("-" * len(header))
    for w in report.workloads:
        heard = f"{w.heard.p50_ms}/{w.heard.p95_ms}/{w.heard.max_ms}"
        raised = f"{w.raised.p50_ms}/{w.raised.p95_ms}/{w.raised.max_ms}"
        print(f"{w.name:<22} {w.rounds:>6}  {heard:>24}  {raised:>25}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--rounds", type=int, default=15, help="preemptions per kind of step")
    args = parser.parse_args(argv)
    report = Report()
    with tempfile.TemporaryDirectory(prefix="respools-bench-") as tmp:
        os.environ["RESPOOLS_RUN_DIR"] = str(Path(tmp) / "holders")
        with server(Path(tmp)) as url:
            client = define_world(url)
            one_round(client, busy_loop)  # warm-up: connections, imports
            report.workloads.append(measure(client, "busy Python loop", busy_loop, args.rounds))
            report.workloads.append(measure(client, "lease.sleep()", sleeping, args.rounds))
            client.close()
    if args.json:
        print(json.dumps(asdict(report)))
    else:
        print_table(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
