"""Safe handoff: when the owner gets a preempted GPU, measured against when the victim's workload exited.

The script starts ``respools server`` (SQLite in a temporary directory) with a local pool of one GPU. A
borrower's step holds it; the owner (whose reserved share it is) asks for it, the reconciler preempts the
borrower with a 1 s grace, and the step **ignores the notice**. Per round it records:

* **exit**: when the victim's last process was gone (watched every millisecond from here);
* **grant**: the owner's ``granted`` event (the reconciler's transaction time; same machine, same clock).

``grant − exit`` is the figure DESIGN §2.8 is about: positive means the owner got the GPU only after the
old workload was gone (never two workloads on one GPU); negative would be an overlap. Two kinds of step:

* ``respools run`` with a command that traps SIGTERM (and a worker child in its group): the SDK sends
  SIGKILL at the deadline, waits for the group to be gone, then releases;
* ``respools.lease(interrupt=False)`` in a process that ignores the notice: the SDK ends the process at
  the deadline and a reporter it started releases the lease once the process is gone.

    python benchmarks/handoff.py               # a table
    python benchmarks/handoff.py --json        # one JSON object
    python benchmarks/handoff.py --rounds 10
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

SRC = str(Path(__file__).resolve().parent.parent / "src")
sys.path.insert(0, SRC)
sys.path.insert(0, str(Path(__file__).resolve().parent))

from preemption_delay import ADMIN_TOKEN, server  # noqa: E402

from respools.client import Client  # noqa: E402
from respools.model import EventKind, RequestSpec, RequestState  # noqa: E402

GRACE_S = 1.0
STUBBORN_COMMAND = textwrap.dedent(
    """
    import os, signal, subprocess, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ignore = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    worker = subprocess.Popen([sys.executable, "-c", ignore])
    open(sys.argv[1], "w").write(f"{os.getpid()} {worker.pid}")
    while True:
        time.sleep(0.05)
    """
)
IGNORING_HOLDER = textwrap.dedent(
    """
    import os, sys, time
    import respools
    with respools.lease(gpu=1, pool="bench", preemptible=True, interrupt=False, progress=False):
        open(sys.argv[1], "w").write(f"{os.getpid()}")
        while True:
            time.sleep(0.05)
    """
)


@dataclass
class Row:
    step: str
    rounds: int
    grant_minus_exit_ms: list[float]
    grant_minus_deadline_ms: list[float]

    @property
    def summary(self) -> dict[str, float]:
        after = self.grant_minus_exit_ms
        return {"min": min(after), "p50": sorted(after)[len(after) // 2], "max": max(after)}


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)
    grace_s: float = GRACE_S
    store: str = "sqlite"
    cpu_count: int = field(default_factory=lambda: os.cpu_count() or 0)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def watch_exit(pids: list[int], found: list[float], until: threading.Event) -> None:
    """Record the moment the last of ``pids`` is gone (polled every millisecond)."""
    while not until.is_set():
        if not any(alive(pid) for pid in pids):
            found.append(time.time())
            return
        time.sleep(0.001)


def define_world(url: str) -> tuple[Client, str]:
    with Client(url, ADMIN_TOKEN) as admin:
        host = {
            "name": "bench-host",
            "gpus": [{"uuid": "GPU-bench-0", "index": 0, "model": "NVIDIA H100 80GB HBM3", "memory_mb": 81559}],
        }
        admin.put("/v1/pools/bench", {"name": "bench", "stack": "local", "preemption_grace_s": GRACE_S})
        admin.put("/v1/pools/bench/hosts/bench-host", host, params={"ttl_s": 3600})
        tokens = {}
        for subject, reserved in (("owner", {"gpu": 1}), ("borrower", {})):
            admin.put(f"/v1/subjects/{subject}", {"name": subject})
            admin.post("/v1/policies", {"subject": subject, "pool": "bench", "reserved": reserved, "priority": 10})
            tokens[subject] = admin.post("/v1/tokens", {"role": "subject", "subject": subject})["token"]
    return Client(url, tokens["owner"]), tokens["borrower"]


def one_round(owner: Client, start_victim: Callable[[Path], subprocess.Popen[bytes]], tmp: Path) -> tuple[float, float]:
    marks = tmp / f"marks-{time.monotonic_ns()}"
    victim = start_victim(marks)
    try:
        deadline = time.monotonic() + 60
        while not marks.exists() or not marks.read_text():
            if victim.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the victim did not start: {victim.returncode}")
            time.sleep(0.01)
        pids = [int(pid) for pid in marks.read_text().split()]
        exits: list[float] = []
        stop = threading.Event()
        watcher = threading.Thread(target=watch_exit, args=(pids, exits, stop), daemon=True)
        watcher.start()
        request = owner.submit(RequestSpec(resources={"gpu": 1}, pools=["bench"]))
        while request.state == RequestState.PENDING:
            request = owner.wait_request(request.id, state=RequestState.PENDING, timeout=10)
        watcher.join(30)
        stop.set()
        victim.wait(30)
    finally:
        if victim.poll() is None:
            victim.kill()
    (granted,) = owner.events(request_id=request.id, kinds=[EventKind.GRANTED])
    assert request.lease_id is not None and exits, "the owner was granted and the victim exited"
    owner.release(request.lease_id)
    with Client(owner.url, ADMIN_TOKEN) as admin:  # the notice is an event of the borrower's
        notices = admin.events(kinds=[EventKind.PREEMPTING], limit=1000)
    victim_lease = [e for e in notices if e.data.get("for_request") == request.id]
    deadline_at = victim_lease[0].data["deadline"] if victim_lease else None
    grant_at = granted.at.timestamp()
    deadline_ts = datetime.fromisoformat(deadline_at).timestamp() if deadline_at else grant_at
    return (grant_at - exits[0]) * 1000, (grant_at - deadline_ts) * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--rounds", type=int, default=5, help="handoffs per kind of step")
    args = parser.parse_args(argv)
    report = Report()
    with tempfile.TemporaryDirectory(prefix="respools-handoff-") as tmp_name:
        tmp = Path(tmp_name)
        os.environ["RESPOOLS_RUN_DIR"] = str(tmp / "holders")
        os.environ["RESPOOLS_HOST_NAME"] = "bench-host"
        with server(tmp) as url:
            owner, borrower = define_world(url)
            env = os.environ | {"PYTHONPATH": SRC, "RESPOOLS_URL": url, "RESPOOLS_TOKEN": borrower}
            (tmp / "stubborn.py").write_text(STUBBORN_COMMAND)
            (tmp / "holder.py").write_text(IGNORING_HOLDER)
            run = [sys.executable, "-c", "from respools.cli import app; app()", "run", "--gpu", "1", "--pool", "bench"]
            steps: dict[str, Callable[[Path], subprocess.Popen[bytes]]] = {
                "respools run, SIGTERM trapped": lambda marks: subprocess.Popen(
                    [*run, "--preemptible", "--", sys.executable, str(tmp / "stubborn.py"), str(marks)],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                ),
                "lease(interrupt=False)": lambda marks: subprocess.Popen(
                    [sys.executable, str(tmp / "holder.py"), str(marks)],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                ),
            }
            for name, start in steps.items():
                samples = [one_round(owner, start, tmp) for _ in range(args.rounds)]
                report.rows.append(
                    Row(name, args.rounds, [round(a, 1) for a, _ in samples], [round(b, 1) for _, b in samples])
                )
            owner.close()
    if args.json:
        print(json.dumps(asdict(report) | {"summary": {row.step: row.summary for row in report.rows}}))
        return 0
    print(
        f"owner's grant against the victim's exit (local stack, SQLite, grace {GRACE_S:g} s, {report.cpu_count} CPUs)"
    )
    header = (
        f"{'victim step':<32} {'rounds':>6}  {'grant - exit min/p50/max (ms)':>30}  {'grant - deadline p50 (ms)':>26}"
    )
    print(header)
    print("-" * len(header))
    for row in report.rows:
        s = row.summary
        late = sorted(row.grant_minus_deadline_ms)[len(row.grant_minus_deadline_ms) // 2]
        print(f"{row.step:<32} {row.rounds:>6}  {s['min']:>8.1f}/{s['p50']:.1f}/{s['max']:.1f}{'':>8}  {late:>26.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
